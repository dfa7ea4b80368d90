import numpy as np, sys
rng = np.random.default_rng(0)
R, C = 128, 256
for k, T in [(8, 297), (32, 297), (8, 200), (32, 594)]:
    x = rng.standard_normal((R, T * C)).astype(np.float32)
    thr = np.full(R, -np.inf)
    top = [np.full(k, -np.inf) for _ in range(R)]
    rounds = counts = 0
    newsum = 0
    tiles_with_rounds = 0
    for t in range(T):
        tile = x[:, t*C:(t+1)*C]
        new = (tile > thr[:, None]).sum(1)
        newsum += new.sum()
        more = new.max() > 1
        r = max(0, new.max() - 1) if more else 0
        # the rounds run until no row has a candidate above the *updated* thr: <= new.max()-1
        rounds += r; tiles_with_rounds += r > 0
        for i in range(R):
            allv = np.concatenate([top[i], tile[i]])
            top[i] = np.sort(allv)[-k:]
            thr[i] = top[i][0]
    print(f"k={k} T={T}: rounds(upper)={rounds} per tile {rounds/T:.2f}, tiles with rounds {tiles_with_rounds}, new entries per row {newsum/R:.1f}")
