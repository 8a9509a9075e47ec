//! SHA-256 throughput of one core over a file, for the hashing ceiling in BENCHMARKS.md.
//!
//! `sha256_rate PATH` hashes it once; `sha256_rate --pair PATH` hashes it twice in step, as a lane of `fix`
//! does (`hubalign::hashing::update_both`). Prints the bytes hashed per second, both digests counted.

use std::io::Read;

use hubalign::hashing::{Sha256Stream, update_both};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let pair = args.first().is_some_and(|a| a == "--pair");
    if pair {
        args.remove(0);
    }
    let [path] = args.as_slice() else { return Err("usage: sha256_rate [--pair] PATH".into()) };
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4 << 20];
    let (mut a, mut b) = (Sha256Stream::default(), Sha256Stream::default());
    let mut total = 0u64;
    let start = std::time::Instant::now();
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if pair {
            update_both(&mut a, &buf[..n], &mut b, &buf[..n]);
        } else {
            a.update(&buf[..n]);
        }
        total += n as u64;
    }
    let (digest, second) = (a.finish_hex(), b.finish_hex());
    let secs = start.elapsed().as_secs_f64();
    if pair && digest != second {
        return Err("the two digests of the same bytes differ".into());
    }
    let hashed = if pair { 2 * total } else { total };
    println!("{:.3} GB/s ({hashed} bytes hashed in {secs:.3} s, {}…)", hashed as f64 / secs / 1e9, &digest[..8]);
    Ok(())
}
