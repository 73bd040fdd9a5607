"""Decoding processors that hold every hypothesis to a structure: well-formed trees for a parser
(`tree.py`), markup kept in order (`markup.py`), glossary terms written (`glossary.py`)."""
