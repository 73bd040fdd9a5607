"""The one installed name: the repository's data/, model_dir/, trainer/, export/ and demo/ folders
are the packages keras_transformer.data, .model_dir, .trainer, .export and .demo (setup.py's
package_dir), never top-level packages of their own."""


def require_installed_name(module_name, folder):
    """Refuses a subpackage imported under its folder's name (e.g. `import data` from a clone's
    root): its modules import each other as keras_transformer.<folder>, so it would load twice,
    as two sets of classes that fail isinstance checks against each other."""
    if module_name != f"keras_transformer.{folder}":
        raise ImportError(
            f"{folder}/ is the package keras_transformer.{folder}: import it as "
            f"`from keras_transformer import {folder}`, and run its commands as "
            f"`python -m keras_transformer.{folder}...` (after `pip install -e .`)")
