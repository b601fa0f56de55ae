// Rust target for probes on IFUNCs (libc's strlen and memset): `ifunc-calls N LENGTH` fills a
// buffer of LENGTH+1 bytes (ptr::write_bytes of a length known at run time: a call of libc's
// memset) and measures a C string of LENGTH bytes with CStr::from_ptr (which calls libc's
// strlen), N times each, and prints how many it measured and their total length.
use std::ffi::{CStr, CString};

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(default)
    };
    let (n, length) = (arg(1, 1000), arg(2, 73));
    let text = CString::new(vec![b'x'; length]).unwrap();
    let mut buffer = vec![0u8; length + 1];
    let mut total = 0usize;
    for _ in 0..n {
        let to = std::hint::black_box(buffer.as_mut_ptr());
        unsafe { std::ptr::write_bytes(to, b'y', std::hint::black_box(length + 1)) };
        let p = std::hint::black_box(text.as_ptr());
        total += unsafe { CStr::from_ptr(p) }.to_bytes().len();
    }
    std::hint::black_box(&mut buffer);
    println!("calls={} total={}", n, total);
}
