//! Build script: new migration files must rebuild the binary that embeds them with `sqlx::migrate!`.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
