// Rust names for the demangling tests: a function in a nested module and a method of a
// generic type's impl. Each counts its calls; the program calls them ROUNDS times (argv[1],
// default 3) and prints, for each, the path Rust itself gives it (std::any::type_name of the
// function item) and its count, as "path count" lines.
use std::sync::atomic::{AtomicU64, Ordering};

static PROBED: AtomicU64 = AtomicU64::new(0);
static BUMPED: AtomicU64 = AtomicU64::new(0);

pub mod shapes {
    pub mod inner {
        #[inline(never)]
        pub fn probed(n: u64) -> u64 {
            super::super::PROBED.fetch_add(1, super::super::Ordering::Relaxed);
            std::hint::black_box(n * 3)
        }
    }

    pub struct Counter<T> {
        pub value: T,
    }

    impl Counter<u64> {
        #[inline(never)]
        pub fn bump(&mut self, by: u64) -> u64 {
            super::BUMPED.fetch_add(1, super::Ordering::Relaxed);
            self.value += std::hint::black_box(by);
            self.value
        }
    }
}

fn path_of<T>(_: T) -> &'static str {
    std::any::type_name::<T>()
}

fn main() {
    let rounds: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let mut counter = shapes::Counter { value: 0u64 };
    let mut sum = 0;
    for r in 0..rounds {
        sum += shapes::inner::probed(r);
        sum += counter.bump(r);
    }
    println!("{} {}", path_of(shapes::inner::probed), PROBED.load(Ordering::Relaxed));
    println!("{} {}", path_of(shapes::Counter::<u64>::bump), BUMPED.load(Ordering::Relaxed));
    println!("sum {}", sum);
}
