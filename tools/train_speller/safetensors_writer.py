"""safetensors, written and read by our own code (no safetensors package on Debian 12).

Layout: u64 little-endian header length N, N bytes of JSON header
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, padded with
spaces so the data starts 8-byte aligned), then the raw little-endian tensor data.
Only F32 is written.
"""
import json
import struct

import numpy as np
import torch


def write(path, tensors):
    """tensors: name -> torch tensor (written as F32, in name order)."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        data = tensors[name].detach().cpu().float().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read(path):
    """name -> torch float32 tensor (F32 files only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {meta['dtype']}, only F32 is read")
        b, e = meta["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(blob[b:e], dtype="<f4").copy()).view(meta["shape"])
    return out
