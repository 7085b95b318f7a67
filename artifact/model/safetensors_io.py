"""A minimal reader/writer of the safetensors format (no `safetensors` package on these hosts).

Format: 8-byte little-endian header length N, then N bytes of JSON {name: {dtype, shape, data_offsets}},
then the raw little-endian tensor bytes (offsets relative to the end of the header).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def save_file(tensors: dict[str, torch.Tensor], path, metadata: dict | None = None) -> None:
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        if t.dtype not in _NAMES:
            raise ValueError(f"safetensors: tensor {name!r} has unsupported dtype {t.dtype}")
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load_file(path, device="cpu") -> dict[str, torch.Tensor]:
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise ValueError(f"safetensors: {path} is too short to hold a header")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"safetensors: {path} header length {n} runs past the end of the file")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"safetensors: {path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        lo, hi = info["data_offsets"]
        buf = bytearray(data[base + lo: base + hi])
        t = torch.frombuffer(buf, dtype=_DTYPES[info["dtype"]]) if buf else torch.empty(0, dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).to(device)
    return out
