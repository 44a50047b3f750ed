//! Structure-aware: a sequence of the Libro's operations (drawn with `arbitrary`) against one
//! house of the simulator (`nyx5_house::sim::run_script`), on real SQLite, through `/outbound`,
//! the queue and the Libro, with replays, ticks and the clock. After every step the simulator's
//! invariants hold (balances sum to zero, none but `casa@` negative, mandates within their caps,
//! finished contracts empty, the journal audits); at the end every operation was done or bounced
//! to its sender, never both, and no request was ever answered 500.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nyx5_house::sim::{MAX_SCRIPT, Scripted, run_script};

#[derive(Arbitrary, Debug)]
enum Op {
    TopUp { who: u8, amount: u16 },
    Accept { buyer: u8, seller: u8, kind: u8, price: u16 },
    Deliver { deal: u8 },
    Release { deal: u8 },
    Refund { deal: u8 },
    Bond { who: u8, verifier: u8, amount: u16, minutes: u16 },
    Mandate { grantor: u8, grantee: u8, cap: u16, parent: Option<u8> },
    Charge { grant: u8, amount: u16 },
    Revoke { grant: u8 },
    Replay { which: u8 },
    Tick,
    Wait { minutes: u16 },
}

impl From<Op> for Scripted {
    fn from(op: Op) -> Scripted {
        match op {
            Op::TopUp { who, amount } => Scripted::TopUp { who, amount },
            Op::Accept { buyer, seller, kind, price } => Scripted::Accept { buyer, seller, kind, price },
            Op::Deliver { deal } => Scripted::Deliver { deal },
            Op::Release { deal } => Scripted::Release { deal },
            Op::Refund { deal } => Scripted::Refund { deal },
            Op::Bond { who, verifier, amount, minutes } => Scripted::Bond { who, verifier, amount, minutes },
            Op::Mandate { grantor, grantee, cap, parent } => Scripted::Mandate { grantor, grantee, cap, parent },
            Op::Charge { grant, amount } => Scripted::Charge { grant, amount },
            Op::Revoke { grant } => Scripted::Revoke { grant },
            Op::Replay { which } => Scripted::Replay { which },
            Op::Tick => Scripted::Tick,
            Op::Wait { minutes } => Scripted::Wait { minutes },
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let script: Vec<Scripted> = ops.into_iter().take(MAX_SCRIPT).map(Scripted::from).collect();
    if let Err(failure) = run_script(&script) {
        panic!("{failure}\nscript: {script:?}");
    }
});
