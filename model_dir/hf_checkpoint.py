"""Reading a Hugging Face checkpoint directory's weights as numpy arrays, without PyTorch.

Hugging Face saves weights as `model.safetensors` (read with the `safetensors` package, the
`marian` extra) or, in older uploads such as most OPUS-MT models, `pytorch_model.bin`: a pickle
whose tensors point into raw storages, in PyTorch's zip format (1.6 and later) or its legacy
one (one stream: the pickle, then the storages). The pickle is read by an unpickler that knows
only the handful of names such a file uses (tensors, storages, OrderedDict): it never imports
PyTorch or runs any other code a file names (torch.load's `weights_only` idea), and a tensor
that would reach outside its storage is refused.
"""

import collections
import json
import pathlib
import pickle
import zipfile

import numpy as np

from keras_transformer.errors import UserError

SAFETENSORS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"

# PyTorch's storage types -> the numpy dtype of their bytes (bfloat16 is widened afterwards).
_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "HalfStorage": np.float16, "DoubleStorage": np.float64,
    "BFloat16Storage": np.uint16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class CheckpointFormatError(UserError):
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
    return {name: (value.astype(np.float32, copy=False) if np.issubdtype(value.dtype, np.floating)
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


class _Storage:
    """A PyTorch storage: `count` values of one type, read now (zip format) or later (legacy)."""

    def __init__(self, storage_type, count):
        self.bfloat16 = storage_type == "BFloat16Storage"
        self.dtype = np.dtype(_STORAGE_DTYPES[storage_type])
        self.count = count
        self.values = None

    def fill(self, raw, path):
        if len(raw) < self.count * self.dtype.itemsize:
            raise CheckpointFormatError(f"{path}: a storage is cut short")
        values = np.frombuffer(raw, self.dtype, self.count)
        self.values = (values.astype(np.uint32) << 16).view(np.float32) if self.bfloat16 \
            else values


class _LazyTensor:
    """A tensor of a `_Storage` (its values may come after the pickle, in the legacy format)."""

    def __init__(self, storage, offset, size, stride, *_):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def array(self, name, path):
        """The tensor as a numpy array, refused if it would reach outside its storage."""
        values = self.storage.values
        last = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride))
        if values is None or min([self.offset, *self.stride]) < 0 or (
                all(self.size) and last >= len(values)):
            raise CheckpointFormatError(f"{path}: tensor {name} lies outside its storage")
        return np.lib.stride_tricks.as_strided(
            values[self.offset:], shape=tuple(self.size),
            strides=[s * values.dtype.itemsize for s in self.stride]).copy()


class _PlainUnpickler(pickle.Unpickler):
    """Numbers, strings and containers only: the legacy format's header and storage keys."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} where plain values belong")


class _TensorUnpickler(pickle.Unpickler):
    """Unpickles a PyTorch state dict: its storages become `_Storage`s (filled at once by
    `read_storage(key)` for the zip format), its tensors `_LazyTensor`s; any other name a
    file holds is refused."""

    def __init__(self, file, path, read_storage=None):
        super().__init__(file)
        self.path, self.read_storage = path, read_storage
        self.storages = {}

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _LazyTensor
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return lambda data, requires_grad, backward_hooks: data
        if module == "torch" and name in _STORAGE_DTYPES:
            return name
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise CheckpointFormatError(f"{self.path}: holds {module}.{name}, which a file of "
                                    f"weights does not; not read")

    def persistent_load(self, pid):
        # zip: (storage, type, key, location, count); legacy: the same and a view's metadata.
        kind, storage_type, key, _location, count = pid[:5]
        if kind != "storage" or storage_type not in _STORAGE_DTYPES or any(pid[5:]):
            raise CheckpointFormatError(f"{self.path}: unknown storage {pid!r}")
        if key not in self.storages:
            self.storages[key] = _Storage(storage_type, count)
            if self.read_storage:
                self.storages[key].fill(self.read_storage(key), self.path)
        return self.storages[key]


# torch.save's legacy (before PyTorch 1.6) format starts with this number, pickled.
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def _read_zip(path):
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise CheckpointFormatError(f"{path}: a zip file without PyTorch's data.pkl")
        prefix = pickles[0].rsplit("/", 1)[0]
        with archive.open(pickles[0]) as file:
            return _TensorUnpickler(file, path, lambda key: archive.read(
                f"{prefix}/data/{key}")).load()


def _read_legacy(path):
    """torch.save's format before 1.6 (most OPUS-MT uploads of 2020): pickles of a magic
    number, a protocol version, system facts, the state dict, its storage keys; then each
    storage's count (int64, little-endian) and bytes."""
    with open(path, "rb") as file:
        if _PlainUnpickler(file).load() != _LEGACY_MAGIC:
            raise CheckpointFormatError(f"{path}: neither of PyTorch's formats (zip, legacy)")
        for _ in range(2):  # the protocol version, the system's facts
            _PlainUnpickler(file).load()
        unpickler = _TensorUnpickler(file, path)
        weights = unpickler.load()
        for key in _PlainUnpickler(file).load():
            storage = unpickler.storages[key]
            count = int.from_bytes(file.read(8), "little")
            if count != storage.count:
                raise CheckpointFormatError(f"{path}: storage {key} holds {count} values, "
                                            f"its tensors say {storage.count}")
            storage.fill(file.read(count * storage.dtype.itemsize), path)
    return weights


def _read_pytorch(path):
    try:
        weights = (_read_zip if zipfile.is_zipfile(path) else _read_legacy)(path)
    except CheckpointFormatError:
        raise
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, KeyError, ValueError,
            TypeError, IndexError) as error:
        raise CheckpointFormatError(f"{path}: not a readable PyTorch file ({error!r})") from None
    if not isinstance(weights, dict):
        raise CheckpointFormatError(f"{path}: holds a {type(weights).__name__}, not a dict of "
                                    f"weights")
    return {name: value.array(name, path) for name, value in weights.items()
            if isinstance(value, _LazyTensor)}


__all__ = ["CheckpointFormatError", "PYTORCH_FILE", "SAFETENSORS_FILE", "read_json",
           "read_weights"]
