// Target for the removal of return probes in Rust: prints "ready", waits for a line on stdin,
// then starts a thread that runs spin() -> step() (which calls libc's getpid) again and again,
// until killed: a call entered after the probes that never returns, calling functions of two
// files.
use std::io::{BufRead, Write};

#[inline(never)]
#[no_mangle]
pub fn step(i: u64) -> u64 {
    std::hint::black_box(i.wrapping_mul(3).wrapping_add(u64::from(std::process::id())))
}

#[inline(never)]
#[no_mangle]
pub fn spin() {
    let mut i = 0u64;
    loop {
        i = step(std::hint::black_box(i));
    }
}

fn main() {
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    std::thread::spawn(spin).join().unwrap();
}
