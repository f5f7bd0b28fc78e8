"""Tests of train/dataset.py: operator files are read as written or refused naming the line."""
import json
from pathlib import Path

import pytest

from dataset import load_labelled, parse_label_map, load_dolly, fmt

HERE = Path(__file__).resolve().parent


def write(tmp_path, lines):
    p = tmp_path / "data.jsonl"
    p.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    return p


def test_example_file_loads():
    rows, other = load_labelled(HERE / "examples" / "operator-example.jsonl")
    assert len(rows) >= 200 and not other
    assert {r.label for r in rows} == {0, 1}
    assert any(r.context for r in rows)


def test_label_rows(tmp_path):
    p = write(tmp_path, [
        json.dumps({"text": "Write a poem", "label": 1}),
        json.dumps({"text": " Summarize ", "context": " a doc ", "label": 0}),
        json.dumps({"text": "Sort these", "context": None, "label": 0, "category": "sorting"}),
    ])
    rows, other = load_labelled(p)
    assert [r.label for r in rows] == [1, 0, 0]
    assert rows[1].text == "Summarize [SEP] a doc" == fmt(" Summarize ", " a doc ")
    assert [r.category for r in rows] == ["label_1", "label_0", "sorting"]
    assert other == []


def test_category_rows_with_map(tmp_path):
    p = write(tmp_path, [
        json.dumps({"text": "a", "category": "billing"}),
        json.dumps({"text": "b", "category": "essay"}),
        json.dumps({"text": "c", "category": "chitchat"}),
    ])
    rows, other = load_labelled(p, parse_label_map('{"billing": 0, "essay": 1}'))
    assert [(r.category, r.label) for r in rows] == [("billing", 0), ("essay", 1)]
    assert [r.category for r in other] == ["chitchat"]


@pytest.mark.parametrize("bad, msg", [
    ('{"text": "x", "label": 2}', "'label' must be the integer 0 (fast) or 1 (slow), got 2"),
    ('{"text": "x", "label": "1"}', "got \"1\""),
    ('{"text": "x", "label": true}', "got true"),
    ('{"text": "x", "label": 1.0}', "got 1.0"),
    ('{"text": "   ", "label": 1}', "'text' must be a non-empty string"),
    ('{"label": 1}', "'text' must be a non-empty string"),
    ('{"text": "x", "context": 5, "label": 1}', "'context' must be a string"),
    ('{"text": "x"}', "neither 'label' (0/1) nor 'category'"),
    ('{"text": "x", "category": "c"}', "no label map was given"),
    ('["text", 1]', "must be a JSON object, got list"),
    ('{"text": "x", "label": 1', "not valid JSON"),
    ('', "empty line"),
])
def test_bad_row_is_refused_naming_the_line(tmp_path, bad, msg):
    p = write(tmp_path, [json.dumps({"text": "fine", "label": 0}), json.dumps({"text": "ok", "label": 1}), bad])
    with pytest.raises(ValueError) as e:
        load_labelled(p)
    assert f"{p}:3: " in str(e.value)
    assert msg in str(e.value)


def test_invalid_utf8_is_refused(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"text": "ok", "label": 0}\n{"text": "\xff", "label": 1}\n')
    with pytest.raises(ValueError, match=r"d.jsonl:2: not valid UTF-8"):
        load_labelled(p)


def test_mixed_kinds_and_one_label_are_refused(tmp_path):
    p = write(tmp_path, [json.dumps({"text": "a", "label": 0}), json.dumps({"text": "b", "category": "x"})])
    with pytest.raises(ValueError, match=r":2: row uses 'category' but earlier rows use 'label'"):
        load_labelled(p, {"x": 1})
    p = write(tmp_path, [json.dumps({"text": "a", "label": 0}), json.dumps({"text": "b", "label": 0})])
    with pytest.raises(ValueError, match="need rows of both labels"):
        load_labelled(p)


def test_bad_label_map():
    for s in ['[1]', '{"a": 2}', '{"a": true}', '{}']:
        with pytest.raises(ValueError, match="TRIAGE_LABEL_MAP"):
            parse_label_map(s)


def test_dolly_split_counts():
    target, other = load_dolly(HERE / "../../shared/datasets/dolly-15k-dev.jsonl")
    assert len(target) == 5671 and len(other) == 8714
