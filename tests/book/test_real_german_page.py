"""The page "Translating real German" (book/11_real_german/11_real_german.ipynb).

Its numbers come from ``multi30k_results.json`` and ``multi30k_test_translations.jsonl``,
written by a Multi30k run that lands separately. The page must build before the files exist
(saying what is missing) and show every section once they do: both are checked by running
the page's code cells in one namespace, in a temporary folder with and without a sample file
of the shared schema (``fixtures/multi30k_results_sample.json``).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil

import matplotlib
import pytest

import chapter_standard as cs
from book_helpers import ROOT

matplotlib.use("Agg")

PAGE = ROOT / "book" / "11_real_german" / "11_real_german.ipynb"
RESULTS = PAGE.with_name("multi30k_results.json")  # the run the prose describes
TRANSLATIONS = PAGE.with_name("multi30k_test_translations.jsonl")  # its 1,000 test translations
LEVERS = PAGE.with_name("multi30k_levers.json")  # the runs that chose the preset
SAMPLE = ROOT / "tests" / "book" / "fixtures" / "multi30k_results_sample.json"


# The earlier hours' results (8,000 subwords in bfloat16, sections 11.3, 11.6 and 11.7; the
# float32 hour, sections 11.6 and 11.7) and the training counts of the test sources: beside the
# page in every test (the tests vary the run's own results and translations).
OTHER_FILES = ("multi30k_results_8k.json", "multi30k_results_float32.json", "multi30k_train_counts.json")


def _run_page(folder, monkeypatch):
    """Run the page's code cells in order, in ``folder``; return (stdout, namespace)."""
    for name in OTHER_FILES:
        if not (folder / name).exists():
            shutil.copy(PAGE.with_name(name), folder / name)
    monkeypatch.chdir(folder)
    cells = json.loads(PAGE.read_text(encoding="utf-8"))["cells"]
    namespace, out = {"__name__": "__page__"}, io.StringIO()
    with contextlib.redirect_stdout(out):
        for index, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                exec(compile("".join(cell["source"]), f"{PAGE.name} cell {index}", "exec"), namespace)
    return out.getvalue(), namespace


def _joined(printed):
    """The printed text with the command's shell line continuations undone."""
    return printed.replace(" \\\n    ", " ")


def test_the_page_follows_chapter_10_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8").splitlines()
    files = [line.split("file:")[1].strip() for line in toc if "file:" in line]
    assert files.index("book/11_real_german/11_real_german") == \
        files.index("book/10_inference/10_inference") + 1


def test_without_the_results_file_the_page_says_what_is_missing(tmp_path, monkeypatch):
    printed, namespace = _run_page(tmp_path, monkeypatch)
    assert namespace["results"] is None
    assert "is not here yet" in printed
    for what in ("SHA-256", "the command", "per-epoch records", "sacreBLEU signatures", "translations"):
        assert what in printed, f"the page does not say that {what!r} is missing:\n{printed}"


def _own_translations(folder, sample):
    """A reader's own run: the shipped translations with one sentence's beam output replaced by
    its greedy one (another file, so not the run the prose describes), written to ``folder``
    and recorded in ``sample`` as the trainer records them; the sample's training file made
    the shipped run's, so the stored word counts apply."""
    lines = TRANSLATIONS.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert first["beam"] != first["greedy"]
    lines[0] = json.dumps({**first, "beam": first["greedy"]}, ensure_ascii=False)
    raw = ("\n".join(lines) + "\n").encode("utf-8")
    (folder / TRANSLATIONS.name).write_bytes(raw)
    shipped = json.loads(RESULTS.read_text(encoding="utf-8"))
    sample["translations"] = {**shipped["translations"], "sha256": hashlib.sha256(raw).hexdigest()}
    sample["data"]["train"]["sha256"] = shipped["data"]["train"]["sha256"]


def test_with_the_results_file_every_section_shows_its_numbers(tmp_path, monkeypatch):
    sample = json.loads(SAMPLE.read_text(encoding="utf-8"))
    _own_translations(tmp_path, sample)
    (tmp_path / "multi30k_results.json").write_text(json.dumps(sample), encoding="utf-8")
    shutil.copy(LEVERS, tmp_path / LEVERS.name)
    printed, namespace = _run_page(tmp_path, monkeypatch)
    assert "missing" not in printed
    assert sample["command"] in _joined(printed) and "7,600,000 parameters" in printed
    assert sample["test"]["signature"] in printed and "37.2" in printed and "39.0" in printed
    assert "29,000 pairs, 1 lines skipped" in printed
    assert "1 of 2 differ from their reference" in printed  # the second example is a miss
    assert "exact match on the test set: 50.0% of the sentences" in printed
    # the full-test-set sections read the run's own translations (one beam output changed back
    # to greedy: 498 changed, where the shipped run has 499)
    assert "brevity penalty" in printed and "beam 4 changes 498 of 1000 translations:" in printed
    assert "source length (words):" in printed and "test sentence 984" in printed
    # the earlier hours' files are read whatever the run's results file holds (sections 11.6-11.7)
    assert "read multi30k_results_8k.json: 9,360 steps, test BLEU 38.54" in printed
    assert "float32, 8,000: " in printed and "5,414 steps, 11 epochs and a part" in printed
    assert "x1.54 steps in the same time" in printed  # float32 512 ms against bfloat16 333 ms
    assert not namespace["THE_RUN"]  # the prose's claims about the shipped run are not asserted on a sample


def test_the_shipped_run_meets_every_claim_of_the_prose(tmp_path, monkeypatch):
    """The page's own folder: the results file the book ships, the claims asserted for it
    (the misses the prose reads, a flattening validation loss, averaging that won, the length
    penalty it tuned)."""
    for path in (RESULTS, TRANSLATIONS, LEVERS):
        shutil.copy(path, tmp_path / path.name)
    printed, namespace = _run_page(tmp_path, monkeypatch)
    assert namespace["THE_RUN"] and namespace["THE_8K_RUN"] and namespace["THE_F32_RUN"]
    assert "20 whole epochs and a part of the next" in printed and "9,435 steps" in printed
    assert "length penalty: 2, the best validation BLEU (beam 4) of 0, 0.3, 0.6," in printed
    assert "28,997 pairs, 1 lines skipped, 2 too long" in printed
    assert "beam 4 changes 499 of 1000 translations:" in printed


def test_the_printed_command_holds_no_folder_of_the_build_machine(tmp_path, monkeypatch):
    results = json.loads(SAMPLE.read_text(encoding="utf-8"))
    results["command"] = ("python -m solutions train --preset multi30k-cpu --data-dir /home/someone/m30k "
                          "--time-budget 60m --out /scratch/runs/m30k")
    (tmp_path / "multi30k_results.json").write_text(json.dumps(results), encoding="utf-8")
    printed, _ = _run_page(tmp_path, monkeypatch)
    assert "--data-dir data/multi30k --time-budget 60m --out runs/m30k" in _joined(printed)
    assert "/home/someone" not in printed and "/scratch" not in printed


def test_the_page_is_a_chapter_to_the_standard():
    """Title, numbered sections, end matter, 2-4 answered questions and the word range of
    CHAPTERS.md, checked with the rules the ten chapters meet (its folder has no number, so
    the number 11 is given here)."""
    cells = json.loads(PAGE.read_text(encoding="utf-8"))["cells"]
    problems = (cs.check_title(cells, 11) + cs.check_sections(cells, 11) + cs.check_think_about_it(cells)
                + cs.check_numbers_asserted(cells) + cs.check_raw_html(cells) + cs.check_maths_text(cells))
    assert not problems, "\n".join(map(str, problems))
    assert 1500 <= cs.word_count(cells) <= cs.WORDS_MAX


@pytest.mark.parametrize("damage, message", [
    (lambda r: r.pop("epochs"), "missing ['epochs']"),
    (lambda r: r.update(schema=2), "schema 2"),
])
def test_a_results_file_of_another_shape_is_refused_with_its_name(tmp_path, monkeypatch, damage, message):
    results = json.loads(SAMPLE.read_text(encoding="utf-8"))
    damage(results)
    (tmp_path / "multi30k_results.json").write_text(json.dumps(results), encoding="utf-8")
    with pytest.raises(ValueError, match="multi30k_results.json") as error:
        _run_page(tmp_path, monkeypatch)
    assert message in str(error.value)
