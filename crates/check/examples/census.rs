use std::collections::{HashSet, HashMap};
use cnpool_check::model::CheckModel;
use cnpool_check::Config;
use stateright::Model;
fn main() {
    let name = std::env::args().nth(1).unwrap_or("small".into());
    let depth: usize = std::env::args().nth(2).and_then(|n| n.parse().ok()).unwrap_or(8);
    let m = CheckModel::new(Config::named(&name).unwrap(), None);
    let mut seen = HashSet::new();
    let mut frontier = m.init_states();
    for s in &frontier { seen.insert(format!("{s:?}")); }
    let mut all = frontier.clone();
    for _ in 0..depth {
        let mut next = vec![];
        for s in &frontier { for n in m.next_states(s) { if seen.insert(format!("{n:?}")) { next.push(n.clone()); all.push(n); } } }
        frontier = next;
    }
    println!("unique {}", all.len());
    let mut comps: HashMap<&str, HashSet<String>> = HashMap::new();
    for s in &all {
        comps.entry("server").or_default().insert(format!("{:?}{:?}{:?}", s.pods, s.claims, s.stores));
        for r in &s.replicas {
            comps.entry("r.pods").or_default().insert(format!("{:?}", r.pods));
            comps.entry("r.claims").or_default().insert(format!("{:?}", r.claims));
            comps.entry("r.notes").or_default().insert(format!("{:?}{:?}{:?}", r.acquired, r.claim_acquired, r.serving));
            comps.entry("replica").or_default().insert(format!("{:?}", r));
        }
    }
    for (k, v) in comps { println!("{k}: {}", v.len()); }
}
