"""kt-translate --documents read, translated and written in pieces (export/document_stream.py):
the pieces join back to the input, and translating in pieces gives the whole's translation."""

import io

from conftest import PRODUCTION_FLAGS, run_main

from keras_transformer.export import document_stream, translate


def test_pieces_are_whole_lines_or_end_after_a_sentence_and_join_back():
    lines = b"".join(b"Line %d holds a sentence. And another one.\r\n" % n for n in range(40))
    long_line = b"It rained. " * 30 + b"Then \xe2\x80\x9cit stopped.\xe2\x80\x9d Fine."
    no_space = "é".encode() * 300
    for data in (lines, long_line, no_space, lines + long_line + b"\n" + no_space, b""):
        pieces = list(document_stream.pieces_of(io.BytesIO(data), 100))
        assert b"".join(pieces) == data
        for piece in pieces[:-1]:
            assert len(piece) <= 100 or b"\n" not in piece
            piece.decode("utf-8")  # never within a character
            if b"\n" in data[:len(piece) + 100]:
                continue
            assert piece.endswith((b". ", b"\xe2\x80\x9d ")) or data is no_space
    pieces = list(document_stream.pieces_of(io.BytesIO(lines), 100))
    assert len(pieces) == 20 and all(piece.count(b"\n") == 2 for piece in pieces)


def test_a_document_in_pieces_translates_as_the_whole(trained_model_dir, tmp_path,
                                                      monkeypatch):
    document = "".join(f"In the beginning God created the heaven and the earth. Verse {n}.\n"
                       f"\nAnd God said, Let there be light: and there was light.\r\n"
                       for n in range(6))
    (tmp_path / "doc.en").write_bytes(document.encode())
    flags = ["--model_dir", trained_model_dir, "--documents", "--input", tmp_path / "doc.en",
             "--batch_size", "4", *PRODUCTION_FLAGS]
    whole = run_main(translate.main, *flags)
    monkeypatch.setattr(document_stream, "PIECE_BYTES", 150)
    calls, translate_document = [], document_stream.translate_document

    def counted(translator, text, **kwargs):
        calls.append(len(text.encode()))
        return translate_document(translator, text, **kwargs)

    monkeypatch.setattr(document_stream, "translate_document", counted)
    in_pieces = run_main(translate.main, *flags, "--output", tmp_path / "out.es")
    assert whole.returncode == in_pieces.returncode == 0, in_pieces.stderr
    assert len(calls) > 4 and max(calls) <= 150
    assert (tmp_path / "out.es").read_bytes().decode("utf-8") == whole.stdout
    assert whole.stdout.count("\r\n") == 6
    summaries = [result.stderr.splitlines()[-1].split(" in ")[0] for result in (whole, in_pieces)]
    assert summaries[0] == summaries[1] == "translated 18 sentence(s)"
