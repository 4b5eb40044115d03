use bulkwire_bench::scale::*;
use bulkwire_bsp::Schedule;
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args[1].as_str();
    let p: u32 = args[2].parse().unwrap();
    let c = Cluster::ethernet25();
    let t = Instant::now();
    match what {
        "empty" => {
            let (l, _k, o) = empty(&c, p, 5).unwrap();
            println!(
                "p={p} empty {l:.0} ns handovers {} pk {:?}",
                o.handovers,
                Packets::of(&o)
            );
        }
        "h" => {
            let (h, o) = h_relations(&c, p, &[0, 16, 64, 256], 2).unwrap();
            println!("p={p} {h:?} handovers {}", o.handovers);
        }
        "x" => {
            let size: usize = args[3].parse().unwrap();
            let sched = match args[4].as_str() {
                "latin" => Schedule::Latin,
                "pid" => Schedule::Pid,
                _ => Schedule::Random,
            };
            let paced = args[5] == "paced";
            let lim = if args.get(6).map(|s| s.as_str()) == Some("overlap") {
                0
            } else {
                1 << 29
            };
            let (x, o) = total_exchange(&c, p, size, sched, paced, lim).unwrap();
            println!(
                "p={p} {x:?} ratio {:.2} handovers {}",
                x.ratio(),
                o.handovers
            );
        }
        "sort" => {
            let o = sample_sort(&c, p, 256).unwrap();
            println!("p={p} sort ok handovers {}", o.handovers);
        }
        _ => panic!(),
    }
    eprintln!("wall {:.2} s", t.elapsed().as_secs_f64());
}
