# tests/e2e/gguf_template.py GGUF — prints the file's tokenizer.chat_template
# (read here independently of pagoda's own GGUF reader).
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def main(path):
    with open(path, "rb") as f:
        magic, version, n_tensors, n_kv = struct.unpack("<IIQQ", f.read(24))
        assert magic == 0x46554747 and version >= 2, "not a GGUF v2+ file"

        def string():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n)

        def skip(t):
            if t == 8:
                string()
            elif t == 9:
                et, n = struct.unpack("<IQ", f.read(12))
                for _ in range(n):
                    skip(et)
            else:
                f.seek(SIZES[t], 1)

        for _ in range(n_kv):
            key = string().decode()
            (t,) = struct.unpack("<I", f.read(4))
            if key == "tokenizer.chat_template" and t == 8:
                sys.stdout.write(string().decode())
                return 0
            skip(t)
    return 1


sys.exit(main(sys.argv[1]))
