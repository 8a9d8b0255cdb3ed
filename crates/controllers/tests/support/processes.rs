//! The node side and the operators as processes of the `cnpool` binary:
//! `cnpool dev --no-operator` runs the simulated kubelet, CNs and HAKeeper
//! (serving HAKeeper over morpc), and each operator is a `cnpool operator`
//! talking to it with the real morpc client. Their output goes to log files
//! named on stderr, which the test harness shows when a test fails.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use cnpool_morpc::{MorpcOptions, MorpcRegistry};

pub struct Processes {
    binary: PathBuf,
    dev: Child,
    dev_lines: Mutex<Receiver<String>>,
    pub discovery: String,
    /// A client of the dev side's HAKeeper that never answers from a cache.
    pub registry: MorpcRegistry,
    operators: Mutex<Vec<Child>>,
    logs: PathBuf,
}

/// Where the cluster's API is: a real server's kubeconfig, or the one the
/// dev side writes for the API it serves itself.
pub enum Api<'a> {
    Cluster { kubeconfig: &'a str },
    ServedByDev { kubeconfig: &'a Path },
}

impl Processes {
    /// Starts `cnpool dev --no-operator` and waits until its HAKeeper serves.
    pub fn start(binary: &str, api: Api<'_>, tag: &str) -> Self {
        let logs = std::env::temp_dir().join(format!("cnpool-e2e-{tag}"));
        std::fs::create_dir_all(&logs).expect("a directory for the processes' logs");
        eprintln!("processes' logs in {}", logs.display());
        let mut command = Command::new(binary);
        command.args([
            "dev",
            "--no-operator",
            "--hakeeper-listen",
            "127.0.0.1:0",
            "--second-hakeeper-listen",
            "127.0.0.1:0",
        ]);
        match api {
            Api::Cluster { kubeconfig } => command.args(["--cluster", kubeconfig]),
            Api::ServedByDev { kubeconfig } => {
                command.args(["--listen", "127.0.0.1:0", "--kubeconfig"]).arg(kubeconfig)
            }
        };
        let mut dev = command
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log_file(&logs, "dev.stderr.log"))
            .spawn()
            .expect("start cnpool dev");
        let stdout = dev.stdout.take().expect("dev's stdout");
        let mut log = log_file(&logs, "dev.stdout.log");
        let (lines, dev_lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = writeln!(log, "{line}");
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let dev_lines = Mutex::new(dev_lines);
        let announced = wait_for_line(&dev_lines, "cnpool dev: HAKeeper (morpc) on ", Duration::from_secs(60));
        let discovery = announced.split([' ', ';']).next().expect("the discovery address").to_owned();
        let registry =
            MorpcRegistry::new(MorpcOptions { store_cache_max_age: Duration::ZERO, ..MorpcOptions::new(&discovery) });
        Self { binary: binary.into(), dev, dev_lines, discovery, registry, operators: Mutex::default(), logs }
    }

    /// Starts a `cnpool operator` for `namespace`, with the short bounds the
    /// in-process operators of the tests use where the command has flags.
    /// `extra` flags go last.
    pub fn start_operator(&self, kubeconfig: &Path, namespace: &str, instance: usize, extra: &[&str]) {
        let log = log_file(&self.logs, &Self::operator_log_name(instance));
        let operator = Command::new(&self.binary)
            .arg("operator")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--namespace", namespace, "--hakeeper-discovery", &self.discovery])
            .args(["--identity", &format!("cnpool-{instance}")])
            .args(["--store-missing-bound", "1s", "--store-removal-timeout", "5s", "--resync", "60s"])
            // The embedded server has no server-side apply, which the lease
            // needs; binding safety does not depend on a leader anyway.
            .args(["--leader-elect=false", "--probe-listen", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().expect("a second handle of the log"))
            .stderr(log)
            .spawn()
            .expect("start cnpool operator");
        self.operators.lock().unwrap().push(operator);
    }

    fn operator_log_name(instance: usize) -> String {
        format!("operator-{instance}.log")
    }

    /// What operator `instance` has logged so far.
    pub fn operator_log(&self, instance: usize) -> String {
        std::fs::read_to_string(self.logs.join(Self::operator_log_name(instance))).unwrap_or_default()
    }

    /// SIGKILLs every operator still running.
    pub fn kill_operators(&self) {
        for operator in self.operators.lock().unwrap().iter_mut() {
            let _ = operator.kill();
            let _ = operator.wait();
        }
    }

    /// Whether every operator started is still running.
    pub fn operators_running(&self) -> bool {
        self.operators.lock().unwrap().iter_mut().all(|operator| matches!(operator.try_wait(), Ok(None)))
    }

    /// Stops (or starts again) the dev side's HAKeeper and waits until it
    /// says it did.
    pub fn toggle_hakeeper(&self, expect: &str) {
        let status = Command::new("kill").args(["-USR1", &self.dev.id().to_string()]).status().expect("run kill");
        assert!(status.success(), "kill -USR1 the dev side");
        wait_for_line(&self.dev_lines, expect, Duration::from_secs(10));
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in self.operators.get_mut().unwrap().iter_mut().chain(std::iter::once(&mut self.dev)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn log_file(dir: &Path, name: &str) -> std::fs::File {
    std::fs::File::create(dir.join(name)).expect("a log file")
}

/// Waits for a line of the dev side's output starting with `prefix` and
/// returns the rest of it.
fn wait_for_line(lines: &Mutex<Receiver<String>>, prefix: &str, within: Duration) -> String {
    let lines = lines.lock().unwrap();
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Some(rest) = line.strip_prefix(prefix) {
                    return rest.to_owned();
                }
            }
            Err(RecvTimeoutError::Timeout) => panic!("cnpool dev did not print {prefix:?} within {within:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("cnpool dev exited before printing {prefix:?}"),
        }
    }
}
