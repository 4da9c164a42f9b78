"""The JSON-lines result store."""

import json
import math

from dataecho.experiments.store import Store


def test_appended_records_are_read_back_by_key(tmp_path):
    store = Store(tmp_path / "sub" / "r.jsonl")
    store.append({"key": "a", "x": 1})
    store.append({"key": "b", "x": 2})
    assert [r["key"] for r in store] == ["a", "b"]
    assert store.get("b") == {"key": "b", "x": 2} and store.get("c") is None


def test_nan_and_infinity_are_stored_as_null_so_the_file_stays_valid_json(tmp_path):
    store = Store(tmp_path / "r.jsonl")
    store.append({"key": "a", "v": math.nan, "c": [math.inf, 1.0]})
    line = (tmp_path / "r.jsonl").read_text()
    assert json.loads(line) == {"key": "a", "v": None, "c": [None, 1.0]}


def test_a_truncated_last_line_is_skipped_and_the_next_append_starts_a_new_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"key": "a"}\n{"key": "b", "x"')
    store = Store(path)
    assert [r["key"] for r in store] == ["a"]
    store.append({"key": "c"})
    assert [r["key"] for r in store] == ["a", "c"]


def test_a_missing_store_is_empty(tmp_path):
    assert len(Store(tmp_path / "none.jsonl")) == 0
