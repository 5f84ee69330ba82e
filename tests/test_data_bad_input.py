"""Bad corpora through `python -m training.train` (in process): exit 2, one `error:` line naming
the file (and line) and what is wrong, and no MLflow store or runs folder. Errors in the
corpus's own records are found while preparing (only the token cache folder exists then);
those of file lists, shards and datasets at config time (nothing is written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from training.data import write_bin

ROOT = Path(__file__).resolve().parents[1]
RECORDS = "".join(json.dumps({"text": f"record {i} " * 30}) + "\n" for i in range(60))
PAIRS = "".join(json.dumps({"source": f"s {i}", "target": f"t {i}"}) + "\n" for i in range(60))


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def _error_line(tmp_path: Path, capsys, *overrides: str) -> str:
    """The one stderr line of a run with `overrides` that must exit 2, after checking that no
    store or runs folder was created."""
    from training.train import _main

    out = tmp_path / "out"
    cfg = compose(
        f"tracking.uri=sqlite:///{out / 'store' / 'mlruns.db'}",
        f"paths.runs_dir={out / 'runs'}",
        f"paths.cache_dir={out / 'cache'}",
        "train.progress=none",
        *overrides,
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not (out / "store").exists() and not (out / "runs").exists()
    return lines[0].removeprefix("error: ")


BAD_LINES = [
    (b"{not json}\n", "is not JSON (Expecting property name"),
    (b"42\n", "is not a JSON object"),
    (b'["a list"]\n', "is not a JSON object"),
    (b'{"text": "caf\xe9"}\n', "is not UTF-8 (byte 0xe9 at column 14)"),
]


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
@pytest.mark.parametrize("line, what", BAD_LINES)
def test_a_bad_jsonl_line_names_the_file_and_line(tmp_path, capsys, line, what, tokenizer):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(RECORDS.encode() + line + RECORDS.encode())
    message = _error_line(
        tmp_path, capsys, "data=text", f"data.path={path}", f"data.tokenizer={tokenizer}"
    )
    assert message.startswith(f"data.path: {path}:61 {what}"), message


def test_a_jsonl_line_without_the_text_field_names_the_file_and_line(tmp_path, capsys):
    path = tmp_path / "docs.jsonl"
    path.write_text(RECORDS + '{"body": "x", "id": 3}\n')
    message = _error_line(tmp_path, capsys, "data=text", f"data.path={path}")
    assert message == f"data.text_field: 'text' not in {path}:61; fields: body, id"


@pytest.mark.parametrize("line, what", BAD_LINES)
def test_a_bad_pairs_line_names_the_file_and_line(tmp_path, capsys, line, what):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(PAIRS.encode() + line)
    message = _error_line(
        tmp_path, capsys, "model=vanilla_seq2seq", "data=pairs", f"data.path={path}"
    )
    assert message.startswith(f"data.path: {path}:61 {what}"), message
    assert not (tmp_path / "out").exists()  # found at config time: nothing written


def test_a_pairs_line_without_a_field_names_the_file_and_line(tmp_path, capsys):
    path = tmp_path / "pairs.jsonl"
    path.write_text(PAIRS + '{"source": "x"}\n')
    message = _error_line(
        tmp_path, capsys, "model=vanilla_seq2seq", "data=pairs", f"data.path={path}"
    )
    assert message == f"data.target_field: 'target' not in {path}:61; fields: source"


def test_non_utf8_plain_text_trains_with_replacement_characters(tmp_path):
    """A .txt file's invalid bytes become U+FFFD (each maximal invalid sequence one), the
    text around them is kept: nothing is cut or dropped."""
    from training.config import DataConfig
    from training.data import prepare_data

    path = tmp_path / "latin1.txt"
    text = "".join(f"caf\xe9 {i} na\xefve\n" for i in range(30000))
    path.write_bytes(text.encode("latin-1") + "tail \u00e9t\u00e9".encode())
    cfg = DataConfig.from_dict({"source": "text", "path": str(path), "tokenizer": "byte"})
    data = prepare_data(cfg, tmp_path / "cache")
    tokens = np.concatenate([data.train, data.val]).astype(np.uint8).tobytes()
    decoded = tokens.replace(b"\0", b"\n").decode("utf-8")
    assert decoded.count("\ufffd") == 60000
    assert sorted(decoded.split()) == sorted(
        text.replace("\xe9", "\ufffd").replace("\xef", "\ufffd").split() + ["tail", "\u00e9t\u00e9"]
    )


def test_a_parquet_file_without_the_text_field_is_one_line(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"body": [f"row {i}" for i in range(60)]}), path)
    message = _error_line(
        tmp_path, capsys, "data=hf", "data.name=parquet", f"data.data_files={path}"
    )
    assert message.startswith("data.text_field: 'text' not in the dataset parquet; columns: ")
    assert "body" in message


def test_a_saved_dataset_without_the_text_field_is_one_line(tmp_path, capsys):
    import datasets

    datasets.Dataset.from_list([{"body": "x"}] * 60).save_to_disk(str(tmp_path / "saved"))
    message = _error_line(tmp_path, capsys, "data=hf", f"data.from_disk={tmp_path / 'saved'}")
    assert message.startswith(f"data.text_field: 'text' not in the dataset {tmp_path / 'saved'}")


def test_a_data_files_glob_matching_nothing_is_one_line(tmp_path, capsys):
    message = _error_line(
        tmp_path, capsys, "data=hf", "data.name=json", f"data.data_files={tmp_path}/none_*.jsonl"
    )
    assert message == f"data.data_files: {tmp_path}/none_*.jsonl matches no files"


def _shard(path: Path, spoil) -> Path:
    write_bin(path, np.arange(100, dtype=np.uint16))
    spoil(path)
    return path


@pytest.mark.parametrize(
    "spoil, what",
    [
        (lambda p: p.write_bytes(b"\1" * 2048), " is not an llm.c token shard (magic 16843009"),
        (
            lambda p: p.write_bytes(p.read_bytes()[:4] + b"\x02" + p.read_bytes()[5:]),
            ": shard version 2, expected 1",
        ),
        (lambda p: p.write_bytes(p.read_bytes()[:-2]), ": the header promises 100 tokens"),
        (lambda p: p.write_bytes(p.read_bytes() + b"\0\0"), ": the header promises 100 tokens"),
    ],
)
def test_a_bad_shard_is_one_line_naming_it(tmp_path, capsys, spoil, what):
    good = _shard(tmp_path / "a.bin", lambda p: None)
    bad = _shard(tmp_path / "b.bin", spoil)
    message = _error_line(tmp_path, capsys, "data=tokens", f"data.path={tmp_path}/*.bin")
    assert message.startswith(f"data.path: {bad}{what}"), (message, good)
    assert not (tmp_path / "out").exists()


def test_a_token_id_beyond_the_vocabulary_is_one_line_naming_the_shard(tmp_path, capsys):
    path = tmp_path / "a.bin"
    write_bin(path, np.array([1, 2, 50257], dtype=np.uint16))
    message = _error_line(tmp_path, capsys, "data=tokens", f"data.path={path}")
    assert message == (
        f"data.vocab_size: 50257, but {path} holds token id 50257; set data.vocab_size above it"
    )


def test_a_shard_glob_matching_nothing_is_one_line(tmp_path, capsys):
    message = _error_line(tmp_path, capsys, "data=tokens", f"data.path={tmp_path}/none_*.bin")
    assert message == f"data.path: {tmp_path}/none_*.bin matches no .bin or .npy token shards"


def _prepare_error(capsys, *overrides: str) -> str:
    """The one stderr line of `python -m training.data prepare` (in process) that must exit 2."""
    from training.data.__main__ import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["prepare", *overrides])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0].removeprefix("error: ")


def test_prepare_checks_the_cache_folder_and_text_files_before_any_work(tmp_path, capsys):
    binary = tmp_path / "corpus.txt"
    binary.write_bytes(bytes(range(256)) * 20)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    text = tmp_path / "text.txt"
    text.write_text("hello world " * 100)
    msg = _prepare_error(capsys, "data=text", f"data.path={text}", f"paths.cache_dir={a_file}")
    assert msg == f"paths.cache_dir: {a_file} is a file, not a folder"
    cache = tmp_path / "cache"
    msg = _prepare_error(capsys, "data=text", f"data.path={binary}", f"paths.cache_dir={cache}")
    assert msg == f"data.path: {binary} is not a text file (it holds NUL bytes)"
    assert not cache.exists()
