// Target for the tests of tracers side by side, in Rust: prints "ready PID", waits until the
// file GO exists, then calls coexist_step() with a short pause every 10 calls until the file
// STOP exists; then prints "calls N", its own count of calls (the truth).
//
//   coexist-loop GO STOP
use std::io::Write;
use std::path::Path;

// One thread calls: a plain counter (a locked add, as an atomic one would be, is an
// instruction the kernel's uprobes refuse to probe).
static mut CALLS: u64 = 0;

#[inline(never)]
#[no_mangle]
pub fn coexist_step(i: u64) -> u64 {
    unsafe { CALLS += 1 };
    std::hint::black_box(i * 2 + 1)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (go, stop) = (&args[1], &args[2]);
    println!("ready {}", std::process::id());
    std::io::stdout().flush().unwrap();
    while !Path::new(go).exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut sum = 0u64;
    let mut i = 0u64;
    while !Path::new(stop).exists() {
        sum = sum.wrapping_add(coexist_step(std::hint::black_box(i)));
        if i % 10 == 9 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        i += 1;
    }
    println!("calls {} sum {}", unsafe { CALLS }, sum);
}
