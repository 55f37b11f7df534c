"""titan's tensor checksum, computed independently with numpy (src/checkpoint/blocks.h):
the sum over elements, mod 2^64, of splitmix64(flat index * 0x9E3779B97F4A7C15 + float32 bits + 0x632BE59BD9B4E019)."""
import numpy as np


def checksum(a):
    bits = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    idx = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = idx * np.uint64(0x9E3779B97F4A7C15) + bits + np.uint64(0x632BE59BD9B4E019)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return sum(int(x) for x in z.tolist()) & ((1 << 64) - 1)
