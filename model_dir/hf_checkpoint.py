"""Reading a Hugging Face checkpoint directory's weights as numpy arrays, without PyTorch.

Hugging Face saves weights as `model.safetensors` (read with the `safetensors` package, the
`marian` extra) or, in older uploads such as most OPUS-MT models, `pytorch_model.bin`: PyTorch's
zip of a pickle whose tensors point into raw storage files. The pickle is read by an unpickler
that knows only the handful of names such a file uses (tensors, storages, OrderedDict): it never
imports PyTorch or runs any other code a file names (torch.load's `weights_only` idea).
"""

import collections
import json
import pathlib
import pickle
import zipfile

import numpy as np

SAFETENSORS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"

# PyTorch's storage types -> the numpy dtype of their bytes (bfloat16 is widened afterwards).
_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "HalfStorage": np.float16, "DoubleStorage": np.float64,
    "BFloat16Storage": np.uint16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class CheckpointFormatError(ValueError):
    """A checkpoint directory without weights, or a weights file that cannot be read (named)."""


def read_weights(directory):
    """{name: np.ndarray} of the weights in `directory` (float tensors as float32).

    Raises:
        CheckpointFormatError: no weights file, a sharded checkpoint, or an unreadable file.
    """
    directory = pathlib.Path(directory)
    safetensors, pytorch = directory / SAFETENSORS_FILE, directory / PYTORCH_FILE
    if safetensors.is_file():
        weights = _read_safetensors(safetensors)
    elif pytorch.is_file():
        weights = _read_pytorch(pytorch)
    else:
        sharded = sorted(p.name for p in directory.glob("*.index.json"))
        raise CheckpointFormatError(
            f"{directory} holds no weights: neither {SAFETENSORS_FILE} nor {PYTORCH_FILE}"
            + (f" ({', '.join(sharded)}: sharded checkpoints are not read)" if sharded else ""))
    return {name: (value.astype(np.float32) if np.issubdtype(value.dtype, np.floating)
                   else value) for name, value in weights.items()}


def read_json(path):
    """The JSON object in `path`; CheckpointFormatError naming it if missing or not JSON."""
    path = pathlib.Path(path)
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointFormatError(f"{path} is missing") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointFormatError(f"{path}: not JSON ({error})") from None
    if not isinstance(content, dict):
        raise CheckpointFormatError(f"{path}: not a JSON object")
    return content


def _read_safetensors(path):
    try:
        from safetensors.numpy import load_file
    except ImportError:
        raise CheckpointFormatError(
            f"{path}: reading safetensors needs the safetensors package: pip install "
            f"'keras-transformer[marian]'") from None
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own SafetensorError, and OSError
        raise CheckpointFormatError(f"{path}: not a readable safetensors file ({error})") \
            from None


class _TensorUnpickler(pickle.Unpickler):
    """Unpickles PyTorch's data.pkl from the zip `archive` (whose folder is `prefix`): storages
    are read from the zip, tensors rebuilt as numpy arrays; any other name is refused."""

    def __init__(self, file, archive, prefix, path):
        super().__init__(file)
        self.archive, self.prefix, self.path = archive, prefix, path

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return lambda data, requires_grad, backward_hooks: data
        if module == "torch" and name in _STORAGE_DTYPES:
            return name
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise CheckpointFormatError(f"{self.path}: holds {module}.{name}, which a file of "
                                    f"weights does not; not read")

    def persistent_load(self, pid):
        kind, storage_type, key, _location, count = pid
        if kind != "storage" or storage_type not in _STORAGE_DTYPES:
            raise CheckpointFormatError(f"{self.path}: unknown storage {pid!r}")
        raw = self.archive.read(f"{self.prefix}/data/{key}")
        values = np.frombuffer(raw, _STORAGE_DTYPES[storage_type], count)
        if storage_type == "BFloat16Storage":
            values = (values.astype(np.uint32) << 16).view(np.float32)
        return values


def _rebuild_tensor(storage, offset, size, stride, *_):
    itemsize = storage.dtype.itemsize
    return np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=[s * itemsize for s in stride]).copy()


def _read_pytorch(path):
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise CheckpointFormatError(f"{path}: not PyTorch's zip format (no data.pkl); "
                                            f"files of PyTorch before 1.6 are not read")
            prefix = pickles[0].rsplit("/", 1)[0]
            with archive.open(pickles[0]) as file:
                weights = _TensorUnpickler(file, archive, prefix, path).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, KeyError, ValueError,
            TypeError) as error:
        if isinstance(error, CheckpointFormatError):
            raise
        raise CheckpointFormatError(f"{path}: not a readable PyTorch file ({error!r})") from None
    if not isinstance(weights, dict):
        raise CheckpointFormatError(f"{path}: holds a {type(weights).__name__}, not a dict of "
                                    f"weights")
    return dict(weights)


__all__ = ["CheckpointFormatError", "PYTORCH_FILE", "SAFETENSORS_FILE", "read_json",
           "read_weights"]
