"""kt-translate --html: a web page in, the same page translated out (`data.html_page` reads the
page and puts the translations back; each text is translated as kt-translate --markup translates
a line)."""

from keras_transformer.data import html_page, markup
from keras_transformer.export.documents import parts
from keras_transformer.export.markup_lines import markup_n_best_lines, unmasked


def translate_page(translator, source, *, batch_size, attributes=True, lang=None,
                   sampling=None):
    """The web page `source` (str) translated: (the page, str; the `html_page.Page` read; how
    many of its texts were left as they are: more items than markup takes, or no translation).

    Each block's sentences (those longer than the translator's max_input_length cut after
    clause marks or into windows of words, as --documents cuts them) and, with `attributes`,
    each alt, title and placeholder value, are translated with their markup kept, `batch_size`
    at a time (`sampling` as for `export.lines.n_best_lines`); `lang`: the page's new
    `<html lang>`, or None to keep it.
    """
    def split(texts):
        return parts(translator.vocabulary, texts, translator.decoding.max_input_length)[:2]

    page = html_page.read(source, attributes=attributes, split=split)
    masked = []
    for text in page.texts:
        try:
            masked.append(markup.mask(text))
        except markup.MarkupError:
            masked.append(None)
    rows = [row for row, line in enumerate(masked) if line is not None]
    lines = [masked[row] for row in rows]
    translations, left = list(page.texts), len(page.texts) - len(rows)
    best = unmasked(markup_n_best_lines(translator, lines, 1, batch_size, sampling=sampling),
                    lines)
    for row, hypotheses in zip(rows, best):
        if hypotheses:
            translations[row] = hypotheses[0].text
        else:
            left += 1
    return page.translated(translations, lang=lang), page, left
