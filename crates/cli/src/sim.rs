//! `cnpool sim`: runs a scenario for many seeds and sums them up.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use anyhow::Context;
use cnpool_sim::report::Page;
use cnpool_sim::summary::Summary;
use cnpool_sim::{Controllers, Keep, Outcome, Scenario};

#[derive(clap::Args)]
pub struct SimArgs {
    /// A scenario file (e.g. scenarios/freetier-01.yaml), or `random` for
    /// one drawn from each seed.
    #[arg(long)]
    scenario: String,
    /// How many seeds to run, from --seed on.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the trace of the (single) seed to this file.
    #[arg(long)]
    trace: Option<String>,
    /// Write an HTML page with the (single) seed's timeline to DIR/index.html.
    #[arg(long, value_name = "DIR")]
    report: Option<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Seeds run at once (threads); defaults to the cores available, at most 2.
    #[arg(long)]
    jobs: Option<usize>,
    /// Whose controllers run: cnpool's, or the model of the Go operator's
    /// algorithm (`legacy`), on the same scenario and seeds.
    #[arg(long, value_enum, default_value_t = ControllerArg::Cnpool)]
    controller: ControllerArg,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ControllerArg {
    Cnpool,
    Legacy,
}

impl From<ControllerArg> for Controllers {
    fn from(arg: ControllerArg) -> Self {
        match arg {
            ControllerArg::Cnpool => Controllers::Cnpool,
            ControllerArg::Legacy => Controllers::Legacy,
        }
    }
}

enum Source {
    File(Box<Scenario>),
    Random,
}

impl Source {
    fn scenario(&self, seed: u64) -> Scenario {
        match self {
            Source::File(scenario) => scenario.as_ref().clone(),
            Source::Random => Scenario::random(seed),
        }
    }
}

/// Runs the seeds; returns whether every one kept every invariant.
/// The stack of each thread that runs seeds.
const SEED_THREAD_STACK: usize = 16 << 20;

pub fn run(args: SimArgs) -> anyhow::Result<bool> {
    if (args.trace.is_some() || args.report.is_some()) && args.seeds != 1 {
        anyhow::bail!("--trace and --report show one seed: use them with --seeds 1");
    }
    let keep = Keep { trace: args.trace.is_some(), report: args.report.is_some() };
    let source = match args.scenario.as_str() {
        "random" => Source::Random,
        path => Source::File(Box::new(Scenario::load(path)?)),
    };
    let name = match &source {
        Source::File(scenario) => scenario.name.clone(),
        Source::Random => "random".to_owned(),
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(2)))
        .clamp(1, args.seeds.max(1) as usize);
    let controllers = Controllers::from(args.controller);
    if let Source::File(scenario) = &source {
        cnpool_sim::run::supports(scenario, controllers).with_context(|| args.scenario.clone())?;
    }
    let summary = Arc::new(Mutex::new(Summary::new(&name, controllers)));
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let progress = std::io::stderr().is_terminal() && args.seeds > 1;
    let started = Instant::now();
    let controller_flag = match controllers {
        Controllers::Cnpool => String::new(),
        other => format!(" --controller {}", other.name()),
    };
    let replay = |seed: u64| {
        format!("cnpool sim --scenario {}{controller_flag} --seed {seed} --trace trace-{seed}.txt", args.scenario)
    };
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            // A run polls every controller's futures on its thread; debug
            // builds need more than a spawned thread's default 2 MiB.
            let seeds = std::thread::Builder::new().name("sim-seeds".into()).stack_size(SEED_THREAD_STACK);
            let spawned = seeds.spawn_scoped(scope, || {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= args.seeds {
                        return;
                    }
                    let seed = args.seed + index;
                    let outcome = match cnpool_sim::run(&source.scenario(seed), seed, controllers, keep) {
                        Ok(outcome) => outcome,
                        Err(error) => {
                            let error = anyhow::Error::new(error).context(format!("seed {seed}"));
                            failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(error);
                            return;
                        }
                    };
                    let written = write_trace(args.trace.as_deref(), &outcome)
                        .and_then(|()| write_report(args.report.as_deref(), &name, &outcome));
                    if let Err(error) = written {
                        failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(error);
                    }
                    summary.lock().unwrap_or_else(PoisonError::into_inner).add(&outcome, || replay(seed));
                    let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if progress {
                        let width = 40;
                        let filled = (finished * width / args.seeds) as usize;
                        eprint!(
                            "\r[{}{}] {finished}/{} seeds",
                            "#".repeat(filled),
                            " ".repeat(width as usize - filled),
                            args.seeds
                        );
                    }
                }
            });
            if let Err(error) = spawned {
                failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(anyhow::Error::new(error));
            }
        }
    });
    if progress {
        eprintln!();
    }
    if let Some(error) = failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(error);
    }
    let mut summary = Arc::try_unwrap(summary)
        .map_err(|_| anyhow::anyhow!("a seed thread outlived the run"))?
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    summary.finish(started.elapsed());
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &summary).context("writing the JSON summary")?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", summary.render())?;
    }
    Ok(summary.failing_seeds == 0)
}

fn write_report(dir: Option<&str>, scenario: &str, outcome: &Outcome) -> anyhow::Result<()> {
    let (Some(dir), Some(data)) = (dir, outcome.report.as_ref()) else { return Ok(()) };
    let title = format!("cnpool sim: {scenario}, seed {}", outcome.seed);
    let page = Page {
        title: &title,
        end: outcome.virtual_time,
        timeline: &data.timeline,
        violations: &outcome.violations,
        reconciles: &data.reconciles,
        writes: &data.writes,
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {dir}"))?;
    let path = std::path::Path::new(dir).join("index.html");
    std::fs::write(&path, page.render()).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("report: {}", path.display());
    Ok(())
}

fn write_trace(path: Option<&str>, outcome: &Outcome) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    let mut text = format!("# seed {} trace digest {:016x}\n", outcome.seed, outcome.trace_digest);
    for line in &outcome.trace {
        text.push_str(line);
        text.push('\n');
    }
    // The verdict beside the evidence, so that a trace explains itself.
    for violation in &outcome.violations {
        text.push_str(&format!(
            "# violation {:?} at {:.1}s: {}\n",
            violation.invariant, violation.at_seconds, violation.detail
        ));
    }
    std::fs::write(path, text).with_context(|| format!("writing the trace to {path}"))
}
