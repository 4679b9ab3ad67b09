# python3 docs/logs/prepared/parallel-merges-index-check.py (stdlib only; a few seconds)
# Emulates the old and new index maps of fwd_merge_kernel and rows_from_scratch_kernel:
# for every output element, the ordered list of scratch offsets it is summed from.
def cdiv(a,b): return -(-a//b)
def unit_coord(u, per_head): return (u // per_head, u % per_head)   # (bh, blk); stand-in, same in both

def fwd_old(N, kBlockM, kD, whole, pieces, split_units):
    res = {}
    for b in range(split_units):
        bh, blk = unit_coord(whole + b, cdiv(N, kBlockM)); i0 = blk*kBlockM
        unit = b*pieces*kBlockM*(kD+2)
        for tid in range(256):
            f = tid
            while f < kBlockM*kD//2:
                r = f//(kD//2); c = 2*(f % (kD//2)); row = i0 + r
                if row >= N: break
                mo = [unit + k*kBlockM*(kD+2) + kBlockM*kD + r for k in range(pieces)]
                lo = [unit + k*kBlockM*(kD+2) + kBlockM*(kD+1) + r for k in range(pieces)]
                for cc in (c, c+1):
                    key = (bh*N+row)*kD + cc
                    assert key not in res
                    res[key] = (tuple(mo), tuple(lo), tuple(unit + k*kBlockM*(kD+2) + r*kD + cc for k in range(pieces)))
                f += 256
    return res

def fwd_new(N, kBlockM, kD, whole, pieces, split_units):
    res = {}
    kPairs = kD//32; kPiece = kBlockM*(kD+2)
    for b in range(split_units*(kBlockM//16)):
        for tid in range(256):
            su = b // (kBlockM//16); t = tid % 16
            r = (b % (kBlockM//16))*16 + tid//16
            bh, blk = unit_coord(whole + su, cdiv(N, kBlockM))
            row = blk*kBlockM + r
            if row >= N: continue
            unit = su*pieces*kPiece
            mo = [unit + k*kPiece + kBlockM*kD + r for k in range(pieces)]
            lo = [unit + k*kPiece + kBlockM*(kD+1) + r for k in range(pieces)]
            for q in range(kPairs):
                for e in (0,1):
                    cc = 2*(q*16+t) + e
                    key = (bh*N+row)*kD + cc
                    assert key not in res
                    res[key] = (tuple(mo), tuple(lo), tuple(unit + k*kPiece + r*kD + cc for k in range(pieces)))
    return res

def scr_old(N, kD, whole, slots, split_units):
    res = {}
    kPairs = kD//2
    for b in range(2*split_units):
        su, o = b//2, b%2
        bh, blk = unit_coord(whole + su, cdiv(N,128)); j0 = blk*128
        base = (su*slots*2 + o)*128*kD  # in floats
        for tid in range(256):
            f = tid
            while f < 128*kPairs and j0 + f//kPairs < N:
                for e in (0,1):
                    key = (o, (bh*N + j0 + f//kPairs)*kD + 2*(f%kPairs) + e)
                    assert key not in res
                    res[key] = tuple(base + 2*(k*2*128*kPairs + f) + e for k in range(slots))
                f += 256
    return res

def scr_new(N, kD, whole, slots, split_units):
    res = {}
    kPairs = kD//32
    for b in range(16*split_units):
        for tid in range(256):
            su = b//16; o = (b//8)%2; t = tid%16
            r = (b%8)*16 + tid//16
            bh, blk = unit_coord(whole + su, cdiv(N,128))
            row = blk*128 + r
            if row >= N: continue
            s = (su*slots*2 + o)*128*kD + r*kD
            for q in range(kPairs):
                for e in (0,1):
                    key = (o, (bh*N + row)*kD + 2*(q*16+t) + e)
                    assert key not in res
                    res[key] = tuple(s + k*2*128*kD + 2*(q*16+t) + e for k in range(slots))
    return res

import itertools
n = 0
for (kBlockM, kD) in ((192, 64), (128, 128)):
    for N in (1000, 4096, 4100, 8192):
        per = cdiv(N, kBlockM)
        for whole, pieces, su in ((per*3 - 2, 2, 2), (5, 3, 3), (0, 4, 1)):
            a = fwd_old(N, kBlockM, kD, whole, pieces, su); b = fwd_new(N, kBlockM, kD, whole, pieces, su)
            assert a == b, (kBlockM, kD, N, whole, pieces); n += 1
for kD in (64, 128):
    for N in (1000, 4096, 4100):
        per = cdiv(N, 128)
        for whole, slots, su in ((per*2 - 3, 3, 3), (1, 1, 2), (0, 5, 1)):
            a = scr_old(N, kD, whole, slots, su); b = scr_new(N, kD, whole, slots, su)
            assert a == b, (kD, N, whole, slots); n += 1
print("index maps identical in", n, "cases")
