"""The noise filter's Python twin answers the same cases as Go's classifier.FilterNoise.

classifier/testdata/noise_filter.jsonl is shared: Go's TestFilterNoiseParity reads it too. A case's
"v1" is the answer of the filter's version 1 (no trailer rule) where it differs from "out".
"""
import json
from pathlib import Path

import pytest

from dataset import fmt
from textfilter import NOISE_FILTER, NOISE_WORDS_V1, NOISE_WORDS_V2, filter_noise, is_noise

CASES = Path(__file__).resolve().parent.parent / "classifier" / "testdata" / "noise_filter.jsonl"


def test_cases_match_go():
    cases = [json.loads(l) for l in CASES.read_text(encoding="utf-8").split("\n") if l]
    assert len(cases) >= 70
    assert sum("v1" in c for c in cases) >= 8  # cases where the trailer rule drops words
    for c in cases:
        assert filter_noise(c["in"]) == c["out"], c["in"]
        assert filter_noise(c["out"]) == c["out"], c["out"]
        v1 = c.get("v1", c["out"])
        assert filter_noise(c["in"], NOISE_WORDS_V1) == v1, c["in"]
        assert filter_noise(v1, NOISE_WORDS_V1) == v1, v1


def test_versions():
    assert NOISE_FILTER == NOISE_WORDS_V2
    assert filter_noise("Why? order 12") == "Why?"
    assert filter_noise("Why? order 12", NOISE_WORDS_V1) == "Why? order"
    with pytest.raises(ValueError, match="stopwords_v9"):
        filter_noise("x", "stopwords_v9")


def test_words():
    assert is_noise("#4821") and is_noise("https://x.io") and is_noise("a@b.co") and is_noise("foo_bar")
    assert is_noise("print(") and is_noise("/etc/hosts") and is_noise("x=1") and is_noise("std::vector")
    assert not is_noise("and/or") and not is_noise("e.g.") and not is_noise("@bob") and not is_noise("(parens)")


def test_fmt_filters_the_instruction_only():
    assert fmt(" Summarize this #4821 ", " In 1969, 3 flew. ") == "Summarize this [SEP] In 1969, 3 flew."
    assert fmt("12345 #4821", "") == "12345 #4821"  # only noise: kept as it came
