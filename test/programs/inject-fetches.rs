// Target for the inject engine's memory and string fetches in Rust: calls greet(name, rec)
// CALLS times (argv[1]); for call i, name is "call-I" (NUL-terminated) and rec is {id = i,
// label = "label-(i % 7)"}, except when i % 10 == 0: name is null and rec points at an
// address nothing is mapped at (greet does not read it then). Each call also asks
// fetch_label for "label-(i % 7)" (null when i % 10 == 0). Prints "calls N sum S", S the sum
// of what greet returned (id * 2 + 1, or 7) and of 1 for each label returned.
use std::ffi::CString;
use std::os::raw::c_char;

#[repr(C)]
pub struct Rec {
    id: i64,
    label: *const c_char,
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn fetch_greet(name: *const c_char, rec: *const Rec, i: i64) -> i64 {
    std::hint::black_box(name);
    if i % 10 == 0 {
        return 7;
    }
    unsafe { (*rec).id * 2 + 1 }
}

/// The label of call i: null when i % 10 == 0.
#[no_mangle]
#[inline(never)]
pub extern "C" fn fetch_label(labels: *const *const c_char, i: i64) -> *const c_char {
    if i % 10 == 0 {
        return std::ptr::null();
    }
    unsafe { *labels.add((i % 7) as usize) }
}

fn main() {
    let count: i64 = std::env::args().nth(1).map(|a| a.parse().unwrap()).unwrap_or(1000);
    let labels: Vec<CString> = (0..7).map(|k| CString::new(format!("label-{}", k)).unwrap()).collect();
    let pointers: Vec<*const c_char> = labels.iter().map(|l| l.as_ptr()).collect();
    let mut sum = 0i64;
    for i in 0..count {
        let name = CString::new(format!("call-{}", i)).unwrap();
        let rec = Rec { id: i, label: labels[(i % 7) as usize].as_ptr() };
        let (p, r) = if i % 10 == 0 {
            (std::ptr::null(), 0x10usize as *const Rec)
        } else {
            (name.as_ptr(), &rec as *const Rec)
        };
        sum += fetch_greet(p, r, i);
        sum += !fetch_label(pointers.as_ptr(), i).is_null() as i64;
    }
    println!("calls {} sum {}", count, sum);
}
