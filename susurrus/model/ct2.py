"""Reader for CTranslate2 ``model.bin`` files (binary version 6), with no ctranslate2 import.

Layout, little-endian: u32 version; spec name (u16 length + NUL-terminated bytes); u32
revision; u32 variable count; per variable: name (u16 length + bytes), u8 rank, rank x u32
dims, u8 dtype id, u32 byte count, raw data; then u32 alias count and (alias, target) names.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
BF16 = 5


class CT2FormatError(ValueError):
    pass


def _read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<H", buf, pos)
    pos += 2
    raw = bytes(buf[pos:pos + n])
    return raw.rstrip(b"\0").decode("utf-8"), pos + n


def read_ct2(source: str | Path | bytes) -> tuple[str, dict[str, np.ndarray]]:
    """Return (spec name, {variable name: array}) with aliases resolved to their targets.

    ``source`` is a path or the file's bytes (the embedded base model comes in two parts)."""
    path = "<bytes>" if isinstance(source, bytes) else Path(source)
    data = source if isinstance(source, bytes) else path.read_bytes()
    buf = memoryview(data)
    try:
        (version,) = struct.unpack_from("<I", buf, 0)
        if version != 6:
            raise CT2FormatError(f"{path}: CTranslate2 binary version {version}, expected 6")
        spec, pos = _read_string(buf, 4)
        _revision, count = struct.unpack_from("<II", buf, pos)
        pos += 8
        variables: dict[str, np.ndarray] = {}
        for _ in range(count):
            name, pos = _read_string(buf, pos)
            (rank,) = struct.unpack_from("<B", buf, pos)
            pos += 1
            dims = struct.unpack_from(f"<{rank}I", buf, pos)
            pos += 4 * rank
            dtype_id, nbytes = struct.unpack_from("<BI", buf, pos)
            pos += 5
            raw = buf[pos:pos + nbytes]
            pos += nbytes
            if len(raw) != nbytes:
                raise CT2FormatError(f"{path}: truncated or corrupt CTranslate2 model "
                                     f"(variable {name!r} needs {nbytes} bytes)")
            if dtype_id == BF16:
                bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
                array = bits.view(np.float32)
            elif dtype_id in DTYPES:
                array = np.frombuffer(raw, dtype=DTYPES[dtype_id])
            else:
                raise CT2FormatError(f"{path}: variable {name!r} has unknown dtype id {dtype_id}")
            variables[name] = array.reshape(dims) if rank else array.reshape(())
        (n_alias,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        for _ in range(n_alias):
            alias, pos = _read_string(buf, pos)
            target, pos = _read_string(buf, pos)
            variables[alias] = variables[target]
    except struct.error as err:
        raise CT2FormatError(f"{path}: truncated or corrupt CTranslate2 model ({err})") from err
    return spec, variables
