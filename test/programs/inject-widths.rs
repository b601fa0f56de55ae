// Return values of each width in Rust: CALLS calls of each function below, one thread, each
// printing what it returned (`u8 I VALUE`), the truth a test compares the return probes'
// values with. Each value is cut from a 64-bit product: the bits of %rax above the returned
// width are whatever the computation left there. No two functions have the same code (rustc
// would merge them: one address, two names).
//
//   inject-widths CALLS
use std::hint::black_box;
use std::io::Write;

fn mix(i: u64) -> u64 {
    (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[inline(never)]
#[no_mangle]
pub fn widths_u8(i: u64) -> u8 {
    mix(black_box(i)) as u8
}

#[inline(never)]
#[no_mangle]
pub fn widths_i8(i: u64) -> i8 {
    (mix(black_box(i)) >> 1) as i8
}

#[inline(never)]
#[no_mangle]
pub fn widths_i16(i: u64) -> i16 {
    (mix(black_box(i)) >> 3) as i16
}

#[inline(never)]
#[no_mangle]
pub fn widths_u32(i: u64) -> u32 {
    (mix(black_box(i)) >> 7) as u32
}

#[inline(never)]
#[no_mangle]
pub fn widths_i32(i: u64) -> i32 {
    (mix(black_box(i)) >> 9) as i32
}

#[inline(never)]
#[no_mangle]
pub fn widths_i64(i: u64) -> i64 {
    mix(black_box(i) ^ 5) as i64
}

fn main() {
    let calls: u64 = std::env::args().nth(1).map_or(100, |a| a.parse().unwrap());
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    for i in 0..calls {
        writeln!(out, "u8 {} {}", i, widths_u8(i)).unwrap();
        writeln!(out, "i8 {} {}", i, widths_i8(i)).unwrap();
        writeln!(out, "i16 {} {}", i, widths_i16(i)).unwrap();
        writeln!(out, "u32 {} {}", i, widths_u32(i)).unwrap();
        writeln!(out, "i32 {} {}", i, widths_i32(i)).unwrap();
        writeln!(out, "i64 {} {}", i, widths_i64(i)).unwrap();
    }
    writeln!(out, "done {}", calls).unwrap();
}
