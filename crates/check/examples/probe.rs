use cnpool_check::model::CheckModel;
use cnpool_check::Config;
use stateright::{Checker, Model};
fn main() {
    let name = std::env::args().nth(1).unwrap_or("small".into());
    let n: usize = std::env::args().nth(2).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let t = std::time::Instant::now();
    let c = CheckModel::new(Config::named(&name).unwrap(), None).checker().threads(2).symmetry_fn(cnpool_check::model::representative).target_state_count(n).spawn_bfs().join();
    println!("states {} unique {} depth {} {:?}", c.state_count(), c.unique_state_count(), c.max_depth(), t.elapsed());
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    println!("{}", s.lines().find(|l| l.starts_with("VmHWM")).unwrap());
    for (k, p) in c.discoveries() { println!("{k}:"); show(c.model(), p.into_vec()); }
}
// debug
pub fn show(m: &CheckModel, path: Vec<(cnpool_check::model::State, Option<cnpool_check::model::Action>)>) {
    for (s, a) in path { if let Some(a) = a { let (_, note) = m.step(&s, &a); println!("  {} {note}", cnpool_check::model::actor(&a)); } else { println!("END {:?}", cnpool_check::model::exclusive(&s)); } }
}
