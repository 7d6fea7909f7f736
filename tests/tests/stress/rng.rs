//! A small seeded generator (SplitMix64): each worker draws its choices from its own, derived
//! from the run's seed and the worker's index, so a seed replays every worker's choices (the
//! interleaving of the threads is the scheduler's, not the seed's).

pub struct Rng(u64);

impl Rng {
    /// The generator of stream `index` of `seed`.
    pub fn new(seed: u64, index: u64) -> Rng {
        let mut r = Rng(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next(); // one step: seeds that differ in few bits start far apart
        r
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "below(0)");
        ((self.next() >> 11) % n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u32) -> bool {
        self.below(100) < percent as usize
    }

    /// One of `items`, chosen uniformly.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// An index into `weights`, chosen with probability proportional to its weight.
    pub fn weighted(&mut self, weights: impl Iterator<Item = u32> + Clone) -> usize {
        let total: u32 = weights.clone().sum();
        let mut x = self.below(total as usize) as u32;
        for (i, w) in weights.enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        unreachable!("the weights changed under the draw")
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_replays_and_streams_differ() {
        let a: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(42, 1);
                move |_| r.next()
            })
            .collect();
        let b: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(42, 1);
                move |_| r.next()
            })
            .collect();
        let c: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(42, 2);
                move |_| r.next()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut r = Rng::new(7, 0);
        let mut seen = [0usize; 3];
        for _ in 0..3000 {
            seen[r.weighted([1u32, 0, 2].into_iter())] += 1;
        }
        assert_eq!(seen[1], 0);
        assert!(seen[0] > 800 && seen[2] > 1700, "{seen:?}");
    }
}
