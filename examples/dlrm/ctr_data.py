"""Synthetic click-through data with a planted teacher, shaped like Criteo's
Kaggle set (13 dense features, 26 categorical ones), for the DLRM examples.

There is no Criteo data here, so the labels come from a fixed random
DLRM-like "teacher" that a student DLRM can learn:

- categorical feature t takes values in [0, rows[t]), rows = the Kaggle
  set's cardinalities capped at ``max_rows``; values are Zipf distributed
  (p(k) ~ 1 / (k + 1)^zipf_s), mapped through a fixed random permutation
  of the table, so that the popular rows are spread over the table;
- dense feature j is log(1 + exp(N(mu_j, sigma_j))) with mu_j, sigma_j fixed
  per feature (positive and skewed, like the log of Criteo's counts);
- the teacher has its own embedding tables (dimension ``dim``, N(0, 1/dim)
  entries), a dense layer 13 -> dim with tanh, the pairwise dot products of
  the 27 vectors, and a linear readout of those 351 dots and the dim dense
  outputs; its logit is scaled to standard deviation ``logit_std`` and
  shifted so that the mean click rate is ``ctr``; labels are
  Bernoulli(sigmoid(logit)).

Everything follows from the seeds: ``TeacherSpec.make(seed)`` builds the
teacher, ``batch(spec, teacher, n, seed)`` draws n samples. The test set is
``batch(..., seed=TEST_SEED)``, training batch i is seed (train_seed, i):
the same on every rank and every run. numpy only, no torch.
"""

from dataclasses import dataclass

import numpy as np

# Cardinalities of the 26 categorical features of Criteo's Kaggle display
# advertising set (as counted by the DLRM reference's preprocessing).
KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
               3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
               142572)
N_DENSE = 13
N_SPARSE = len(KAGGLE_ROWS)
TEST_SEED = 0x7E57


@dataclass(frozen=True)
class DataSpec:
    max_rows: int = 20000   # cap on a table's rows (the Kaggle tables go to 10M)
    dim: int = 16           # the teacher's embedding dimension
    zipf_s: float = 1.1     # exponent of the categorical values' Zipf law
    ctr: float = 0.26       # mean click rate (Kaggle: about 0.26)
    logit_std: float = 2.0  # spread of the teacher's logits: how learnable
    seed: int = 1           # the teacher and the feature laws

    @property
    def rows(self):
        return tuple(min(r, self.max_rows) for r in KAGGLE_ROWS)


class Teacher:
    """The fixed random function that labels the samples (see the module doc)."""

    def __init__(self, spec: DataSpec):
        rng = np.random.default_rng([spec.seed, 1])
        d = spec.dim
        self.spec = spec
        self.dense_mu = rng.normal(0.0, 1.5, N_DENSE)
        self.dense_sigma = rng.uniform(0.5, 2.0, N_DENSE)
        self.perm = [rng.permutation(r) for r in spec.rows]
        self.zipf_cdf = []
        for r in spec.rows:
            p = 1.0 / np.arange(1, r + 1, dtype=np.float64) ** spec.zipf_s
            self.zipf_cdf.append(np.cumsum(p / p.sum()))
        self.tables = [rng.normal(0.0, 1.0 / np.sqrt(d), (r, d)) for r in spec.rows]
        self.w_dense = rng.normal(0.0, 1.0 / np.sqrt(N_DENSE), (N_DENSE, d))
        n_vec = N_SPARSE + 1
        self.w_dots = rng.normal(0.0, 1.0, n_vec * (n_vec - 1) // 2)
        self.w_lin = rng.normal(0.0, 1.0, d)
        self.tri = np.tril_indices(n_vec, -1)
        # logit scale and shift from a calibration sample (seeded)
        raw = self._raw_logit(*self._features(20000, np.random.default_rng([spec.seed, 2])))
        self.scale = spec.logit_std / raw.std()
        z = raw * self.scale
        lo, hi = -20.0, 20.0  # bisection for the shift that gives the mean click rate
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if (1.0 / (1.0 + np.exp(-(z + mid)))).mean() < spec.ctr:
                lo = mid
            else:
                hi = mid
        self.shift = 0.5 * (lo + hi)

    def _features(self, n, rng):
        dense = np.log1p(np.exp(rng.normal(self.dense_mu, self.dense_sigma, (n, N_DENSE))))
        sparse = np.empty((n, N_SPARSE), dtype=np.int64)
        for t in range(N_SPARSE):
            k = np.searchsorted(self.zipf_cdf[t], rng.random(n), side="right")
            sparse[:, t] = self.perm[t][np.minimum(k, len(self.perm[t]) - 1)]
        return dense, sparse

    def _raw_logit(self, dense, sparse):
        vecs = [np.tanh(dense @ self.w_dense)]
        vecs += [self.tables[t][sparse[:, t]] for t in range(N_SPARSE)]
        v = np.stack(vecs, axis=1)                      # n x 27 x d
        dots = np.matmul(v, v.transpose(0, 2, 1))[:, self.tri[0], self.tri[1]]
        return dots @ self.w_dots / np.sqrt(len(self.w_dots)) + vecs[0] @ self.w_lin

    def batch(self, n, seed):
        """n samples drawn from seed (an int or a sequence of ints): dense
        float32 (n x 13), sparse int64 (n x 26), labels float32 (n,) and the
        teacher's click probabilities (n,), float64."""
        rng = np.random.default_rng(seed)
        dense, sparse = self._features(n, rng)
        p = 1.0 / (1.0 + np.exp(-(self._raw_logit(dense, sparse) * self.scale + self.shift)))
        labels = (rng.random(n) < p).astype(np.float32)
        return dense.astype(np.float32), sparse, labels, p

    def bayes_accuracy(self, p):
        """The accuracy of predicting the likelier label from the true
        probability: what no student can beat on average."""
        return float(np.mean(np.maximum(p, 1.0 - p)))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Describe the synthetic CTR data of a seed.")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-rows", type=int, default=DataSpec.max_rows)
    ap.add_argument("-n", type=int, default=100000)
    a = ap.parse_args()
    teacher = Teacher(DataSpec(max_rows=a.max_rows, seed=a.seed))
    dense, sparse, labels, p = teacher.batch(a.n, TEST_SEED)
    print(f"rows per table: {teacher.spec.rows}")
    print(f"{a.n} samples: click rate {labels.mean():.4f}, "
          f"Bayes accuracy {teacher.bayes_accuracy(p):.4f}, "
          f"majority-class accuracy {max(labels.mean(), 1 - labels.mean()):.4f}")
