// Rust target for probes on an IFUNC (libc's strlen): `ifunc-calls N LENGTH` measures a C
// string of LENGTH bytes N times with CStr::from_ptr (which calls libc's strlen) and prints
// how many it measured and their total length.
use std::ffi::{CStr, CString};

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(default)
    };
    let (n, length) = (arg(1, 1000), arg(2, 73));
    let text = CString::new(vec![b'x'; length]).unwrap();
    let mut total = 0usize;
    for _ in 0..n {
        let p = std::hint::black_box(text.as_ptr());
        total += unsafe { CStr::from_ptr(p) }.to_bytes().len();
    }
    println!("calls={} total={}", n, total);
}
