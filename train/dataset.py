"""Reading the notebook's training data: Dolly, or an operator's own labelled JSONL.

An operator's file has one JSON object per line:

    {"text": "instruction", "context": "optional document", "label": 0}    # 0 fast, 1 slow

or, instead of `label`, a `category` string that a mapping turns into 0/1
(TRIAGE_LABEL_MAP='{"billing": 0, "essay": 1}'). Rows whose category the mapping
leaves out are not training rows: they become out-of-category text, like
Dolly's other categories.

Nothing is repaired silently: a line that is not a JSON object, a missing or
blank `text`, a non-string `context`, a `label` other than the integers 0 and 1,
a row with neither `label` nor `category`, or a file with both kinds of row is
refused with a ValueError naming the file and the line.
"""
import json
from pathlib import Path

from textfilter import filter_noise

SEP = " [SEP] "

# Dolly's mapping: fast (0) = classification, summarization; slow (1) = creative_writing, general_qa.
DOLLY_LABELS = {"classification": 0, "summarization": 0, "creative_writing": 1, "general_qa": 1}


def fmt(instruction, context):
    """Mirror of classifier.FormatInput in Go: the instruction without its noise words (textfilter),
    both trimmed, joined with [SEP] when there is a context. The context is kept as it is."""
    i, c = filter_noise(instruction).strip(), context.strip()
    return i + SEP + c if c else i


class Row:
    __slots__ = ("instruction", "context", "category", "label", "line", "response")

    def __init__(self, instruction, context, category, label, line, response=""):
        self.instruction, self.context, self.category, self.label, self.line = instruction, context, category, label, line
        self.response = response

    @property
    def text(self):
        return fmt(self.instruction, self.context)


def load_dolly(path):
    """Dolly rows: (target rows with labels, other-category rows as out-of-category text)."""
    target, other = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            r = json.loads(line)
            cat = r["category"]
            row = Row(r["instruction"], r.get("context") or "", cat, DOLLY_LABELS.get(cat), n, r.get("response") or "")
            (target if cat in DOLLY_LABELS else other).append(row)
    return target, other


def load_labelled(path, label_map=None):
    """An operator's file: (labelled rows, rows whose category the mapping leaves out).

    Raises ValueError naming the file and line of the first bad row.
    """
    path = Path(path)
    target, other = [], []
    kind = None  # "label" or "category", fixed by the first row
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            where = f"{path}:{n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
            if not line.strip():
                raise ValueError(f"{where}: empty line (one JSON object per line, no blank lines)")
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(r, dict):
                raise ValueError(f"{where}: a row must be a JSON object, got {type(r).__name__}")
            text = r.get("text")
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{where}: 'text' must be a non-empty string")
            ctx = r.get("context", "")
            if ctx is None:
                ctx = ""
            if not isinstance(ctx, str):
                raise ValueError(f"{where}: 'context' must be a string when present, got {type(ctx).__name__}")
            if "label" in r:
                this = "label"
                lab = r["label"]
                # bool is an int in Python; true/false are refused so a typo cannot pass as 0/1.
                if isinstance(lab, bool) or lab not in (0, 1) or not isinstance(lab, int):
                    raise ValueError(f"{where}: 'label' must be the integer 0 (fast) or 1 (slow), got {json.dumps(lab)}")
                cat = r.get("category")
                if cat is not None and not isinstance(cat, str):
                    raise ValueError(f"{where}: 'category' must be a string when present")
                cat = cat or f"label_{lab}"
            elif "category" in r:
                this = "category"
                cat = r["category"]
                if not isinstance(cat, str) or not cat:
                    raise ValueError(f"{where}: 'category' must be a non-empty string")
                if label_map is None:
                    raise ValueError(f"{where}: row has a 'category' but no 'label', and no label map was given (TRIAGE_LABEL_MAP)")
                lab = label_map.get(cat)
            else:
                raise ValueError(f"{where}: row has neither 'label' (0/1) nor 'category'")
            if kind is None:
                kind = this
            elif kind != this:
                raise ValueError(f"{where}: row uses '{this}' but earlier rows use '{kind}'; use one or the other")
            row = Row(text, ctx, cat, lab, n)
            (target if lab is not None else other).append(row)
    if kind is None:
        raise ValueError(f"{path}: no rows")
    labels = {r.label for r in target}
    if labels != {0, 1}:
        raise ValueError(f"{path}: need rows of both labels 0 and 1, found only {sorted(labels)}")
    return target, other


def parse_label_map(s):
    """TRIAGE_LABEL_MAP: a JSON object mapping category → 0 or 1."""
    if not s:
        return None
    m = json.loads(s)
    if not isinstance(m, dict) or not m or any(isinstance(v, bool) or v not in (0, 1) for v in m.values()):
        raise ValueError(f"TRIAGE_LABEL_MAP must be a JSON object of category → 0 or 1, got {s!r}")
    return m


def load_unlabelled(path):
    """Out-of-category text for the band rule: JSONL with `text` (or Dolly's `instruction`) and optional `context`."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            r = json.loads(line)
            text = r.get("text", r.get("instruction"))
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{path}:{n}: 'text' (or 'instruction') must be a non-empty string")
            rows.append(Row(text, r.get("context") or "", r.get("category", "unlabelled"), None, n))
    return rows
