//! The options that `repack`, `worker`, `serve` and `doctor` share. They say where the Hub is, who
//! publishes, where the store and the work go, and how jobs are checked and published.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use hubalign::hub::HubClient;
use hubalign::repack::metal::rendezvous::MetalHandoff;
use hubalign::safetensors::Alignment;
use hubalign::store::mirrors::DEFAULT_MIRROR_CAPS;

use super::audit::HubBounds;
use super::store_args::StoreArgs;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(super) enum Device {
    /// Wait for the macOS runner's Metal check (the production default).
    Metal,
    /// Accept the local CPU MLX check, and say so in the card.
    Cpu,
}

impl From<Device> for hubalign::job::VerifyDevice {
    fn from(device: Device) -> Self {
        match device {
            Device::Metal => hubalign::job::VerifyDevice::Metal,
            Device::Cpu => hubalign::job::VerifyDevice::Cpu,
        }
    }
}

/// Options `repack` and `worker` share.
#[derive(Args)]
pub(super) struct WorkerArgs {
    /// Hub endpoint [default: HF_ENDPOINT, else https://huggingface.co].
    #[arg(long, value_name = "URL")]
    pub(super) endpoint: Option<String>,
    /// Hub token with write access [default: HF_TOKEN, else the token file under HF_HOME]; never logged.
    #[arg(long, value_name = "TOKEN")]
    pub(super) token: Option<String>,
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// Namespace the `-aligned` mirrors go to [default: the token's user].
    #[arg(long, value_name = "NS")]
    pub(super) target_namespace: Option<String>,
    /// Where the MLX load check runs before publishing: `metal` waits for the macOS runner; `cpu` accepts
    /// the local CPU check.
    #[arg(long, value_enum, default_value = "metal")]
    pub(super) verify_device: Device,
    /// Where a bundle waits for the Metal check. `api` keeps it in the work directory, and runners fetch it
    /// over the runner API (`--runner-listen`), which they must reach. `hub` commits it to the still-private
    /// mirror. Runners then need to reach only the database and the Hub (`verify-runner --db`), and any
    /// worker publishes the mirror afterwards.
    #[arg(long, default_value = "api", value_name = "api|hub")]
    pub(super) metal_handoff: MetalHandoff,
    /// Directory for downloads and repaired bundles; jobs waiting for the Metal check keep their files here
    /// [default: beside the database, `hubalign.work/`].
    #[arg(long, value_name = "DIR")]
    pub(super) work_dir: Option<PathBuf>,
    /// Python with `mlx` installed, for the MLX load check.
    #[arg(long, env = "HUBALIGN_PYTHON", default_value = "python3", value_name = "PYTHON")]
    pub(super) python: PathBuf,
    /// Put the mirrors' data sections on this many bytes (a power of two up to 16384). Without it, repairs
    /// pad to 8 and leave alone the shards that no loader copies from.
    #[arg(long, value_name = "BYTES")]
    pub(super) alignment: Option<Alignment>,
    /// Open a pull request on the source repo with the repaired files instead of publishing a mirror. It
    /// never opens two for the same commit, and takes a closed one as "no".
    #[arg(long)]
    pub(super) pr: bool,
    /// Seconds a job's lease lasts. A running worker renews it every third of this, however long a step
    /// takes. A worker that crashed or stalled loses its job to another once the lease runs out.
    #[arg(long, default_value_t = 1800, value_name = "SECS")]
    pub(super) lease_secs: u64,
    /// Seconds the job in hand may go on after SIGTERM or Ctrl-C. Then the worker stops and releases it, so
    /// the next worker takes it up at once. The default fits deploy/'s 1800 s before a stopping process is
    /// killed.
    #[arg(long, default_value_t = hubalign::worker::DEFAULT_STOP_GRACE.as_secs(), value_name = "SECS")]
    pub(super) stop_grace_secs: u64,
    /// The largest bundle a job downloads; a larger one is refused with the reason.
    #[arg(long, default_value_t = hubalign::repack::DEFAULT_MAX_BUNDLE_BYTES as f64 / 1e9, value_name = "GB")]
    pub(super) max_bundle_gb: f64,
    /// Also mirror private sources of the target namespace itself, as private mirrors there. These mirrors
    /// are never public. The flag never covers another owner's private repos, nor gated ones.
    #[arg(long)]
    pub(super) private_mirrors: bool,
    /// Connections a job's download holds at once, shared by the files it fetches at once. A file fetched
    /// alone comes in 4 MiB ranges over several of them, because a CDN limits each connection's rate.
    #[arg(long, default_value_t = hubalign::repack::download::DEFAULT_CONNECTIONS, value_name = "N")]
    pub(super) download_connections: usize,
    /// New mirrors of one source namespace per UTC day. A job over the cap waits for the next day without
    /// spending an attempt. Updates to mirrors already published ignore the cap.
    #[arg(long, default_value_t = DEFAULT_MIRROR_CAPS.per_namespace, value_name = "N")]
    pub(super) max_new_mirrors_per_namespace: u32,
    /// New mirrors in all per UTC day, as `--max-new-mirrors-per-namespace`.
    #[arg(long, default_value_t = DEFAULT_MIRROR_CAPS.total, value_name = "N")]
    pub(super) max_new_mirrors: u32,
    #[command(flatten)]
    pub(super) bounds: HubBounds,
}

impl WorkerArgs {
    /// Builds a Hub client of its own, with the same endpoint, token and bounds.
    pub(super) fn hub_client(&self) -> anyhow::Result<HubClient> {
        self.bounds.client(super::hub_config(self.endpoint.clone(), self.token.clone())?)
    }
}
