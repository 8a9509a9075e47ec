//! Single-core SHA-256 throughput over a file, for the hashing ceiling in BENCHMARKS.md: `sha256_rate PATH`.

use std::io::Read;

use sha2::{Digest, Sha256};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: sha256_rate PATH")?;
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4 << 20];
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    let start = std::time::Instant::now();
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    let digest = hasher.finalize();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{:.3} GB/s ({total} bytes in {secs:.3} s, {:02x}{:02x}…)",
        total as f64 / secs / 1e9,
        digest[0],
        digest[1]
    );
    Ok(())
}
