# Reads a committed scaletrain checkpoint with h5py only (no scaletrain code):
# every tensor shard listed in index.json is found by name in its rank file
# with the indexed shape, float32 dtype and matching attributes, and (format
# /3) its data where index.json's file_offset says.
# Usage: check_h5py.py STEP_DIR ; exit 0 when all good, 77 when h5py is missing.
import json
import os
import sys

try:
    import h5py
except ImportError:
    print("h5py not installed")
    sys.exit(77)

step_dir = sys.argv[1]
with open(os.path.join(step_dir, "index.json")) as f:
    index = json.load(f)
assert index["format"] in ("scaletrain.checkpoint/2", "scaletrain.checkpoint/3"), index["format"]
v3 = index["format"] == "scaletrain.checkpoint/3"
n = 0
for name, t in index["tensors"].items():
    for s in t["shards"]:
        with h5py.File(os.path.join(step_dir, s["file"]), "r") as h:
            d = h[name]
            assert list(d.shape) == s["shape"], (name, d.shape, s["shape"])
            assert d.dtype == "<f4", (name, d.dtype)
            assert list(d.attrs["global_shape"]) == t["global_shape"], name
            assert list(d.attrs["offset"]) == s["offset"], name
            assert int(d.attrs["checksum"]) == s["checksum"], name
            dt = d.attrs["dtype"]
            assert (dt.decode() if isinstance(dt, bytes) else str(dt)) == "float32", dt
            if v3 and d.size:
                assert d.id.get_offset() == s["file_offset"], (name, d.id.get_offset())
            _ = d[...]
            n += 1
    with h5py.File(os.path.join(step_dir, index["files"][0]["file"]), "r") as h:
        json.loads(bytes(h["_meta/scalars.json"][...]).decode())
print(f"h5py: {n} shards of {len(index['tensors'])} tensors ok")
