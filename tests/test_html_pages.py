"""data/html_page.py and kt-translate --html: a web page in, the same page translated out, read
by html5lib (as a browser reads it) into the same element tree, code and `translate="no"`
content byte for byte; the same page through the SavedModel's translate_with_markup."""

import pathlib
import re

import html5lib
import pytest
import tensorflow as tf
from conftest import run_main
from test_markup_translation import GREEDY_FLAGS

from keras_transformer import model_dir
from keras_transformer.data import html_page, markup
from keras_transformer.export import translate
from keras_transformer.export.documents import parts
from keras_transformer.export.markup_translator import MarkupTranslator
from keras_transformer.export.translator import Translator

PAGES = pathlib.Path(__file__).with_name("data") / "html"
# Three real pages (tests/data/html/LICENSE.md): an article, a page of navigation, a table and
# forms, and a page of scripts and styles.
REAL = ("sqlite_zeroconf.html", "sqlite_support.html", "python_search.html")
# The cases and the elements kept whole, in one made-up page.
MADE = """<!DOCTYPE html>
<html><head><title>Tom &amp; Jerry</title><style>p > b { color: red }</style></head>
<body>
<p>Tom &amp; Jerry&#39;s house.</p>
<p>Don&#8217;t go, it&#8217;s late &#8212; 10&nbsp;km &lt;b&gt; away.</p>
<p>Hello friend.</p><script>var s = '<b>not a tag</b>';</script>
<p>Run <code>ls -l</code> and <span translate="no">keep this text</span> now.</p>
<div class="x notranslate"><p>Nor this one.</p></div>
<pre>
  code   stays   as it is
</pre>
<img src="a.png" alt="A cat on a mat"><input placeholder="Your name" title='Name here'>
<textarea>Typed text.</textarea>
</body></html>
"""
KEPT = re.compile(r"<(script|style|pre|code|textarea)\b[^>]*>.*?</\1\s*>", re.S | re.I)
TRANSLATED_ATTRIBUTES = {"alt", "title", "placeholder"}


def tree(page):
    """The page as html5lib builds it: [(depth, tag, attributes but the translated ones and
    <html lang>)], in document order."""
    root = html5lib.parse(page, treebuilder="etree", namespaceHTMLElements=False)
    out = []

    def walk(element, depth):
        if isinstance(element.tag, str):  # not a comment
            ignored = TRANSLATED_ATTRIBUTES | ({"lang"} if element.tag == "html" else set())
            out.append((depth, element.tag, {name: value for name, value in
                                             element.attrib.items() if name not in ignored}))
        for child in element:
            walk(child, depth + 1)

    walk(root, 0)
    return out


def kept_text(page):
    """The text of every element with translate="no" or class notranslate, as html5lib reads
    it."""
    root = html5lib.parse(page, treebuilder="etree", namespaceHTMLElements=False)
    return ["".join(element.itertext()) for element in root.iter()
            if isinstance(element.tag, str) and (element.get("translate") == "no" or
                                                  "notranslate" in element.get("class", ""))]


def check_the_same_page(source, translated):
    assert tree(translated) == tree(source)
    assert KEPT.findall(translated) and [m.group(0) for m in KEPT.finditer(translated)] == [
        m.group(0) for m in KEPT.finditer(source)]  # code byte for byte
    assert kept_text(translated) == kept_text(source)


def shout(text):
    """A made-up translation: the text upper-cased, its tags (and comments) as they are."""
    return re.sub(r"(<[^>]*>)|([^<]+)", lambda match: match.group(1) or match.group(2).upper(),
                  text)


@pytest.mark.parametrize("name", [*REAL, "made"])
def test_a_page_reads_into_its_texts_and_back(name):
    source = MADE if name == "made" else (PAGES / name).read_text(encoding="utf-8")
    page = html_page.read(source)
    same = page.translated(page.texts)
    check_the_same_page(source, same)
    shouting = page.translated([shout(text) for text in page.texts], lang="es")
    check_the_same_page(source, shouting)
    assert re.search(r"<html[^>]* lang=\"es\"", shouting)
    # Every text with a letter outside what is kept is translated (upper-cased here).
    root = html5lib.parse(shouting, treebuilder="etree", namespaceHTMLElements=False)
    kept = {"script", "style", "pre", "code", "textarea"}

    def texts(element, inside_kept):
        inside_kept = inside_kept or element.tag in kept or element.get("translate") == "no" \
            or "notranslate" in element.get("class", "")
        for text in [element.text] + [child.tail for child in element]:
            if text and not inside_kept:
                yield text
        for child in element:
            if isinstance(child.tag, str):
                yield from texts(child, inside_kept)

    assert [text for text in texts(root, False) if text != text.upper()] == []
    for element in root.iter():
        for attribute in TRANSLATED_ATTRIBUTES & set(element.attrib):
            assert element.get(attribute) == element.get(attribute).upper()


def test_references_come_out_as_valid_html_meaning_the_same_characters():
    page = html_page.read(MADE)
    assert [markup.mask(text).text for text in page.texts[4:6]] == [  # what the model reads
        "Tom & Jerry's house.", "Don’t go, it’s late — ｟1｠ \u00a0km <b> away."]
    assert not any("not a tag" in text or "keep this" in text or "ls -l" in text
                   for text in page.texts)
    out = page.translated(page.texts)
    root = html5lib.parse(out, treebuilder="etree", namespaceHTMLElements=False)
    source = html5lib.parse(MADE, treebuilder="etree", namespaceHTMLElements=False)
    assert [("".join(element.itertext())) for element in root.iter("p")] == [
        ("".join(element.itertext())) for element in source.iter("p")]
    assert "Tom &amp; Jerry's house." in out and "&lt;b&gt; away" in out
    # A translation that moves a tag before another has them put back in the source's order.
    run = next(text for text in page.texts if text.startswith("Run"))
    assert run == "Run <!--kt-kept-0--> and <!--kt-kept-1--> now."
    moved = page.translated([text if text != run else
                             "Corre <!--kt-kept-1--> y <!--kt-kept-0--> ahora."
                             for text in page.texts])
    assert "Corre <code>ls -l</code> y <span translate=\"no\">keep this text</span> ahora." \
        in moved


@pytest.mark.slow
def test_kt_translate_html_and_the_signature_give_the_same_page(markup_run, tmp_path):
    loaded = model_dir.load(markup_run)
    translator = Translator(loaded.model, loaded.vocabulary, max_input_length=64,
                            extra_length=10, beam_size=1)
    serving = MarkupTranslator(translator)  # held: its graph functions hold it weakly
    # The page machinery is held on all three pages above; here what a model adds (tags
    # placed by it, its text escaped) on a real page and the made-up one.
    for name in ("sqlite_support.html", "made"):
        source = MADE if name == "made" else (PAGES / name).read_text(encoding="utf-8")
        (tmp_path / "page.html").write_text(source, encoding="utf-8")
        result = run_main(translate.main, "--model_dir", markup_run, "--html", "--input",
                          tmp_path / "page.html", "--batch_size", 64, *GREEDY_FLAGS)
        assert result.returncode == 0, result.stderr
        assert "left as they were" not in result.stderr
        check_the_same_page(source, result.stdout)
        # The TF Serving client's way: the page split by the same function, its texts sent to
        # translate_with_markup, the translations put back.
        page = html_page.read(source, split=lambda texts: parts(
            loaded.vocabulary, texts, translator.decoding.max_input_length)[:2])
        assert len(page.texts) <= 64  # one batch, as kt-translate's
        served = [text.decode("utf-8") for text in
                  serving.translate_with_markup(tf.constant(page.texts))["translations"].numpy()]
        assert page.translated(served, lang=loaded.run.data.target_lang) == result.stdout


def test_html_refuses_the_flags_of_lines(tmp_path):
    for flags, message in ((["--markup"], "--html reads the page's markup and sentences itself: "
                                          "drop --markup"),
                           (["--n_best", "2"], "--html writes the translated page alone: drop "
                                               "--n_best"),
                           (["--checks"], "--checks cannot go with --html")):
        refused = run_main(translate.main, "--model_dir", tmp_path, "--html", *flags)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    refused = run_main(translate.main, "--model_dir", tmp_path, "--no-html_attributes")
    assert refused.returncode == 2 and "--no-html_attributes is for --html" in refused.stderr
