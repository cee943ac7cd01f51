"""A report made by a tt-metal build older than a kernel change the model prices at its newer version only
(``report_build``): its header says so, and reading it warns for the rows the change affects. The rows are
counted here from the CSV cells (op, transpose dim, logical C), not from the model's specs."""

import csv
import pathlib

import pytest
from _shared_data import profiler_reports_dir

from costmodel.blackhole.cli import main
from costmodel.blackhole.report_build import BUILD_COLUMN, BUILD_COLUMN_SINCE, KERNEL_CHANGES
from costmodel.blackhole.report_reader import read_report

CLIP = profiler_reports_dir() / "bh_64_clip_encoder_1.csv"
DEEPSEEK = profiler_reports_dir() / "bh_8xp150_deepseek_v3_d_p.csv"
HERE = pathlib.Path(__file__).parent / "data"
NEWER = sorted(p for d in ("profiler_more", "profiler_pairs") for p in (HERE / d).glob("bh_*.csv")
               if not p.stem.endswith("perf_report"))
QWEN3_4B = HERE / "profiler_more" / "bh_qwen3_4b_optimized_decode.csv"
needs_clip = pytest.mark.skipif(not CLIP.is_file(), reason=f"real reports not found at {CLIP.parent}")
OLDER = "may have run an older kernel"


def hc_padding_rows(path: pathlib.Path) -> int:
    """Timed rows (a DEVICE KERNEL DURATION) of an HC transpose of a tiled input whose C (the logical Z dim)
    is not a multiple of 32, from the cells."""
    n = 0
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if (row["OP CODE"] == "TransposeDeviceOperation" and "TransposeOpDim::HC" in row["ATTRIBUTES"]
                    and row["INPUT_0_LAYOUT"] == "TILE" and row["DEVICE KERNEL DURATION [ns]"].strip()):
                c = int(row["INPUT_0_Z_PAD[LOGICAL]"].split("[")[1].rstrip("]"))
                n += c % 32 != 0
    return n


def edited(src: pathlib.Path, dst: pathlib.Path, *, add: bool) -> pathlib.Path:
    """``src`` with ``BUILD_COLUMN`` added (empty cells) or removed."""
    with src.open(newline="") as f:
        rows = list(csv.reader(f))
    if add:
        rows = [r + ([BUILD_COLUMN] if i == 0 else [""]) for i, r in enumerate(rows)]
    else:
        k = rows[0].index(BUILD_COLUMN)
        rows = [r[:k] + r[k + 1:] for r in rows]
    with dst.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return dst


def older_warnings(path) -> list[str]:
    return [w for w in read_report(path).warnings if OLDER in w]


def test_every_change_predates_the_column():
    """A report with the column ran every listed change's newer kernel."""
    assert KERNEL_CHANGES and all(c.merged < BUILD_COLUMN_SINCE for c in KERNEL_CHANGES)


@needs_clip
def test_the_older_clip_report_warns_for_its_padded_hc_transposes(capsys):
    n = hc_padding_rows(CLIP)
    assert n == 96  # both of CLIP's HC shapes pad C (19 and 12 of 32)
    (w,) = older_warnings(CLIP)
    assert w.startswith(f"{n} modelled rows {OLDER}") and "#36896" in w and BUILD_COLUMN in w
    main(["coverage", str(CLIP)])
    assert f"warning: {n} modelled rows {OLDER}" in capsys.readouterr().err


@pytest.mark.parametrize("path", NEWER, ids=lambda p: p.stem)
def test_newer_reports_do_not_warn(path):
    with path.open(newline="") as f:
        assert BUILD_COLUMN in next(csv.reader(f))
    assert older_warnings(path) == []


@needs_clip
def test_the_column_decides(tmp_path):
    """CLIP with the column added reads as a newer build's report; Qwen3-4B's without it warns for its own
    padded HC transposes (C 1, 8 and 16 of 32), and DeepSeek's (which has the column) for none."""
    assert older_warnings(edited(CLIP, tmp_path / "clip.csv", add=True)) == []
    n = hc_padding_rows(QWEN3_4B)
    assert n > 0
    (w,) = older_warnings(edited(QWEN3_4B, tmp_path / "qwen.csv", add=False))
    assert w.startswith(f"{n} modelled rows")
    assert older_warnings(DEEPSEEK) == []
