"""``--data`` files that numpy cannot read as they claim to be: each is refused in one line,
``zoo: error: argument --data: ...`` and exit status 2, before any fit and without reading (or
allocating) more than the file holds; a valid file loads exactly as ``np.load`` reads it."""

import io
import struct
import zipfile
import zlib

import numpy as np
import pytest

from inference.tools import cli_paths
from inference.tools.cli import main

FIT = ["fit", "gmm", "--num-steps", "2"]
#: A header for 10^11 x 2 float64 values, 1.6 TB, far more than any file here holds.
HUGE_SHAPE = (10**11, 2)
HUGE_BYTES = 10**11 * 2 * 8


def _refusal(capsys, path) -> str:
    """The one line ``zoo fit`` prints for ``--data path``, checked to be a refusal."""
    assert main([*FIT, "--data", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zoo: error: argument --data: ")
    assert repr(str(path)) in lines[0]
    return lines[0]


def _npy_with_huge_header(payload: bytes) -> bytes:
    """A .npy file, as numpy.save writes its header (version 1.0), whose header declares
    ``HUGE_SHAPE`` of float64 but which holds only ``payload`` after it."""
    out = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": HUGE_SHAPE}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + payload


def _deflated_member_start(path) -> int:
    """Where the compressed bytes of the first member of the zip archive ``path`` begin."""
    blob = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        offset = archive.infolist()[0].header_offset
    name_length, extra_length = struct.unpack("<HH", blob[offset + 26 : offset + 30])
    return offset + 30 + name_length + extra_length


def test_a_damaged_compressed_npz_is_refused_in_one_line(tmp_path, capsys, no_fit):
    path = tmp_path / "x.npz"
    np.savez_compressed(path, x=np.random.default_rng(0).normal(size=(200, 2)))
    blob = bytearray(path.read_bytes())
    blob[_deflated_member_start(path) + 6] ^= 0x55  # inside the deflate stream
    path.write_bytes(bytes(blob))
    with np.load(path) as arrays, pytest.raises(zlib.error):  # the damage numpy passes on
        arrays["x"]
    line = _refusal(capsys, path)
    assert "is not a readable .npz archive" in line
    assert "while decompressing data" in line


def test_a_npy_whose_header_declares_more_than_it_holds_is_refused_from_the_header(
    tmp_path, capsys, no_fit
):
    path = tmp_path / "x.npy"
    path.write_bytes(_npy_with_huge_header(bytes(64)))
    line = _refusal(capsys, path)
    assert "is not a readable .npy array" in line
    assert f"its header declares {HUGE_BYTES} bytes of data" in line
    assert "the file holds only 64 after it" in line


@pytest.mark.parametrize(
    "compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"]
)
def test_a_npz_member_whose_header_declares_more_than_it_holds_is_refused_from_the_header(
    tmp_path, capsys, no_fit, compression
):
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w", compression) as archive:
        archive.writestr("x.npy", _npy_with_huge_header(bytes(64)))
    line = _refusal(capsys, path)
    assert "is not a readable .npz archive" in line
    assert f"the header of its member 'x' declares {HUGE_BYTES} bytes of data" in line
    assert "the member holds only 64 after it" in line


def _write_version(version):
    def save(path, array):
        with open(path, "wb") as f:
            np.lib.format.write_array(f, array, version=version)

    return save


def _with_trailing_bytes(path, array):
    np.save(path, array)
    with open(path, "ab") as f:
        f.write(b"trailing bytes numpy never reads")


ARRAYS = {
    "float64": np.random.default_rng(1).normal(size=(30, 2)),
    "float32, Fortran order": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(4, 3)),
    "int16, big-endian": np.arange(-5, 5, dtype=">i2").reshape(5, 2),
    "empty": np.zeros((0, 2)),
    "scalar": np.array(3.5),
    "structured": np.zeros(3, dtype=[("a", "<f8"), ("b", "<i4")]),
}


@pytest.mark.parametrize(
    "save",
    [np.save, _write_version((2, 0)), _write_version((3, 0)), _with_trailing_bytes],
    ids=["numpy.save", "version 2.0", "version 3.0", "trailing bytes"],
)
@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_a_valid_npy_loads_as_numpy_reads_it(tmp_path, save, name):
    path = tmp_path / "x.npy"
    save(path, ARRAYS[name])
    got, expected = cli_paths._read_npy(str(path)), np.load(path, allow_pickle=False)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.flags.f_contiguous == expected.flags.f_contiguous
    assert got.tobytes() == expected.tobytes() == ARRAYS[name].tobytes()


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_a_valid_npz_loads_as_numpy_reads_it(tmp_path, save):
    path = tmp_path / "x.npz"
    arrays = {key.replace(" ", "_").replace(",", ""): value for key, value in ARRAYS.items()}
    save(path, **arrays)
    got = cli_paths._read_npz(str(path))
    assert sorted(got) == sorted(arrays)
    for key, value in arrays.items():
        assert got[key].dtype == value.dtype and got[key].shape == value.shape
        assert got[key].tobytes() == value.tobytes()
