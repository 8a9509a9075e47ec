//! Runs a throwaway PostgreSQL server of its own, for the tests and the benchmarks. `initdb` makes the
//! cluster in a temporary directory. It is served on a free loopback port and is gone when its owner is.
//!
//! It needs Debian's `postgresql` package, or any install that has `initdb` and `postgres` in
//! `pg_config --bindir`, `/usr/lib/postgresql/*/bin` or `PATH`. PostgreSQL refuses to run as root, so as
//! root the cluster belongs to the `postgres` user. The server is started through
//! `setpriv --pdeathsig KILL`, from a thread that lives as long as the process. So it dies with the process
//! that started it, even one killed with SIGKILL.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sqlx::{Connection, Executor, PgConnection};
use thiserror::Error;

/// Why the scratch server could not be had.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ScratchError {
    /// No PostgreSQL install was found.
    #[error(
        "no PostgreSQL server binaries (initdb, postgres) in `pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH"
    )]
    NotInstalled,
    /// A step failed.
    #[error("scratch PostgreSQL: {0}")]
    Step(String),
}

/// A running scratch server.
#[derive(Debug)]
pub struct ScratchPostgres {
    port: u16,
    dir: PathBuf,
    child: std::sync::Mutex<Option<Child>>,
}

/// Where the process's one shared server is, once started.
static SHARED: OnceLock<Result<ScratchPostgres, String>> = OnceLock::new();

impl ScratchPostgres {
    /// The process's one server, started at the first call. Each user takes a database of its own
    /// ([`ScratchPostgres::database`]), so tests share a server, not data.
    pub fn shared() -> Result<&'static ScratchPostgres, ScratchError> {
        SHARED
            .get_or_init(|| {
                // Start from a thread that never ends, since the parent-death signal follows the thread that
                // forked.
                let (tx, rx) = std::sync::mpsc::channel();
                let spawned = std::thread::Builder::new().name("scratch postgres".into()).spawn(move || {
                    let _ = tx.send(ScratchPostgres::start().map_err(|e| e.to_string()));
                    loop {
                        std::thread::park();
                    }
                });
                match spawned {
                    Ok(_) => rx.recv().unwrap_or_else(|_| Err("the starting thread ended".into())),
                    Err(e) => Err(e.to_string()),
                }
            })
            .as_ref()
            .map_err(|e| ScratchError::Step(e.clone()))
    }

    /// Starts a server owned by the calling thread. The server dies when that thread does.
    pub fn start() -> Result<ScratchPostgres, ScratchError> {
        let bin = bin_dir().ok_or(ScratchError::NotInstalled)?;
        remove_stale_clusters();
        let dir = std::env::temp_dir().join(format!("hubalign-scratch-pg-{}-{}", std::process::id(), unique()));
        let step = |what: &str, e: &dyn std::fmt::Display| ScratchError::Step(format!("{what}: {e}"));
        std::fs::create_dir_all(&dir).map_err(|e| step("creating its directory", &e))?;
        let as_root = is_root();
        if as_root {
            let chown = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status();
            if !chown.is_ok_and(|s| s.success()) {
                return Err(ScratchError::Step(format!("chown postgres {}", dir.display())));
            }
        }
        let data = dir.join("data");
        let out = as_owner(as_root, &bin.join("initdb"))
            .args(["--auth=trust", "--username=postgres", "--encoding=UTF8", "--locale=C", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .map_err(|e| step("running initdb", &e))?;
        if !out.status.success() {
            return Err(ScratchError::Step(format!("initdb: {}", String::from_utf8_lossy(&out.stderr).trim())));
        }
        let port = free_port().map_err(|e| step("finding a free port", &e))?;
        let log = std::fs::File::create(dir.join("server.log")).map_err(|e| step("server.log", &e))?;
        if as_root {
            let _ = Command::new("chown").arg("postgres:postgres").arg(dir.join("server.log")).status();
        }
        let mut server = Command::new("setpriv");
        server.args(["--pdeathsig", "KILL"]);
        if as_root {
            server.args(["--reuid", "postgres", "--regid", "postgres", "--init-groups"]);
        }
        let child = server
            .arg(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(&dir)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=300"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| step("starting postgres", &e))?;
        let scratch = ScratchPostgres { port, dir, child: std::sync::Mutex::new(Some(child)) };
        scratch.wait_ready(&bin)?;
        Ok(scratch)
    }

    /// The server's URL for `database`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates an empty database with a name of its own and returns its URL.
    pub fn database(&self) -> Result<String, ScratchError> {
        let name = format!("t{}_{}", std::process::id(), unique());
        let url = self.url("postgres");
        // Run on a thread of its own, with a runtime of its own, so a caller inside a runtime may call it
        // too.
        let created = std::thread::scope(|s| {
            s.spawn(|| -> Result<(), String> {
                let rt =
                    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
                rt.block_on(async {
                    let mut conn = PgConnection::connect(&url).await?;
                    // The name is ours (digits and an underscore), never a caller's.
                    conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).await?;
                    conn.close().await
                })
                .map_err(|e| e.to_string())
            })
            .join()
        });
        created
            .map_err(|_| ScratchError::Step("creating a database panicked".into()))?
            .map_err(|e| ScratchError::Step(format!("creating a database: {e}")))?;
        Ok(self.url(&name))
    }

    /// Waits until the server accepts connections, by `pg_isready`. A listening socket is not enough: the
    /// server answers "starting up" for a while after it opens one.
    fn wait_ready(&self, bin: &Path) -> Result<(), ScratchError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            let exited = self.child.lock().ok().and_then(|mut c| c.as_mut().and_then(|c| c.try_wait().ok().flatten()));
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                return Err(ScratchError::Step(format!("the server did not start: {}", log.trim())));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ScratchPostgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.lock().ok().and_then(|mut c| c.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where `initdb` and `postgres` are.
fn bin_dir() -> Option<PathBuf> {
    let has = |dir: &Path| ["initdb", "postgres", "pg_isready"].iter().all(|b| dir.join(b).is_file());
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| dirs.filter_map(Result::ok).map(|d| d.path().join("bin")).collect())
        .unwrap_or_default();
    // The newest version first.
    debian.sort_by_key(|p| std::cmp::Reverse(p.parent().and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())));
    let path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    from_pg_config.into_iter().chain(debian).chain(path).find(|d| has(d))
}

/// Runs `program` as the cluster's owner: `postgres` when we are root, else ourselves.
fn as_owner(as_root: bool, program: &Path) -> Command {
    if as_root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", "postgres", "--regid", "postgres", "--init-groups"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Whether this process runs as root (`/proc/self` belongs to the effective user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A number unique within the process.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Removes the directories of clusters whose process is gone. A server dies with its process, but its files
/// stay.
fn remove_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("hubalign-scratch-pg-").and_then(|r| r.split('-').next()) else { continue };
        let alive = Path::new("/proc").join(pid).exists();
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
