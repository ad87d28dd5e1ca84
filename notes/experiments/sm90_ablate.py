"""Writes timing-only ablation variants of submission.py (results wrong by design) under
build/abl/<name>/submission.py, for `tools/sm90_sweep.py --module build/abl/<name>/submission.py`.
Used on 2026-12-01 (second session, run 3) against the kernel of that day; the replaced
lines must exist verbatim, so re-point them when the kernel changes.

    python notes/experiments/sm90_ablate.py
"""

import os

SRC = open("submission.py").read()
TOK_STORE = "                    self.store_token_words(storage, tok_w, tok, packed, scales, (2 * j, 2 * j + 1))\n"
W_DEC = "                    p = decode_e2m1_word(wm[b][h][j], sc[b][h][j // 2])\n"
RAW = "                    p = [wm[b][h][j], sc[b][h][j // 2], wm[b][h][(j + 1) % 4], sc[b][h][1 - j // 2]]\n"
GEMM = """                    cute.gemm(tiled_mma, acc[b], tCrW[f][(None, None, st)],
                              tCrT[(None, None, 2 * (j % 2) + st, j // 2 + 2 * buf)], acc[b])
"""
VARIANTS = {
    "notok": [(TOK_STORE, "                    pass\n")],  # no token decode or stores
    "nowdec": [(W_DEC, RAW)],  # weights' packed words go to wgmma undecoded
    "nodec": [(TOK_STORE, "                    pass\n"), (W_DEC, RAW)],
    "nogemm": [(GEMM, "                    pass\n")],  # decode and data movement only
}

for name, pairs in VARIANTS.items():
    s = SRC
    for old, new in pairs:
        if old not in s:
            raise SystemExit(f"{name}: the line to replace is gone: {old.strip()[:70]}")
        s = s.replace(old, new)
    os.makedirs(f"build/abl/{name}", exist_ok=True)
    with open(f"build/abl/{name}/submission.py", "w") as f:
        f.write(s)
    print("wrote", f"build/abl/{name}/submission.py")
