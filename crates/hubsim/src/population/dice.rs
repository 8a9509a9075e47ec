//! Rolls the population's dice. They are counter-based, so repo `i` of seed `s` is the same whatever else was
//! generated.

/// splitmix64's finaliser: a good 64-bit mix, stable across platforms.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stream of rolls for one thing (a repo, a push), keyed by the seed and that thing's number.
#[derive(Debug, Clone)]
pub struct Dice {
    state: u64,
}

impl Dice {
    /// The dice of item `item` under `seed`, for the purpose `salt` names.
    pub fn new(seed: u64, salt: u64, item: u64) -> Dice {
        Dice { state: mix(seed ^ mix(salt ^ mix(item))) }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = mix(self.state);
        self.state
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// An index into `weights`, each chosen in proportion to its weight.
    pub fn weighted(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut roll = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if roll < *w {
                return i;
            }
            roll -= w;
        }
        weights.len().saturating_sub(1)
    }

    /// A log-uniform number in `[1, max]`: most small, a few large, as publishers' sizes and downloads are.
    pub fn log_uniform(&mut self, max: u64) -> u64 {
        ((max.max(1) as f64).ln() * self.unit()).exp() as u64
    }
}
