"""kt-demo (`python -m keras_transformer.demo`): train, evaluate, translate, export, reload and
draw attention in one command. It sits above trainer/ and export/ and uses both."""

from keras_transformer._layout import require_installed_name

require_installed_name(__name__, "demo")
