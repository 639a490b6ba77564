"""Edited copies of GGUF files for the tests that feed weft broken or mismatched models (gguf-py)."""
import gguf


def gguf_rewrite(src, dst, kv=None, tensors=None, drop=(), add_kv=None):
    """Writes a copy of the GGUF src to dst with: metadata values in kv {key: value} replaced (same type),
    keys in add_kv {key: (value, type)} added, tensors in tensors {name: numpy array} replaced, tensors named in
    drop left out. Everything else is copied as stored."""
    kv, tensors, add_kv = kv or {}, tensors or {}, add_kv or {}
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.alignment"):
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, kv.get(name, f.contents()), f.types[0], sub_type=sub)
    for k, (v, vt) in add_kv.items():
        w.add_key_value(k, v, vt)
    for t in r.tensors:
        if t.name in drop:
            continue
        if t.name in tensors:
            w.add_tensor(t.name, tensors[t.name])
        else:
            w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
