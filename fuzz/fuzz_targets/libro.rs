//! The Libro's decoders (docs/SPEC.md §14–§16): an operation's body (`Op::parse`), a quote, a
//! receipt and an entry, each read from the same JSON object. None may panic; an accepted
//! document, written canonically, must read back to an equal one; an accepted entry's lines sum
//! to zero; an accepted operation is the one its `op` names.
#![no_main]
#![allow(clippy::panic)]

use libfuzzer_sys::fuzz_target;
use nyx5_rules::libro::op::Op;
use nyx5_proto::json::Value;
use nyx5_proto::libro::Entry;
use nyx5_proto::limits::MAX_DOCUMENT_BYTES;
use nyx5_proto::quote::Quote;
use nyx5_proto::receipt::Receipt;

fn again(v: &Value) -> nyx5_proto::Object {
    let text = v.canonical();
    match Value::parse(&text, MAX_DOCUMENT_BYTES * 4) {
        Ok(Value::Object(o)) => o,
        other => panic!("a canonical document does not read back: {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(o)) = Value::parse(data, MAX_DOCUMENT_BYTES) else {
        return;
    };
    if let Ok(op) = Op::parse(&o) {
        assert_eq!(Some(op.name()), o.get("op").and_then(Value::as_str), "an operation is the one it names");
        if let Some(amount) = op.commits() {
            assert!(amount > 0 && amount <= nyx5_proto::limits::MAX_AMOUNT, "a committed amount out of range");
        }
    }
    if let Ok(q) = Quote::from_object(o.clone()) {
        let back = Quote::from_object(again(&q.to_value())).expect("a canonical quote reads back");
        assert_eq!(q, back);
        assert!(q.price > 0);
    }
    if let Ok(r) = Receipt::from_object(o.clone()) {
        let back = Receipt::from_object(again(&r.to_value())).expect("a canonical receipt reads back");
        assert_eq!(r, back);
    }
    if let Ok(e) = Entry::from_object(o.clone()) {
        let sum: i64 = e.lines.iter().map(|l| l.delta).sum();
        assert_eq!(sum, 0, "an accepted entry is balanced");
        let back = Entry::from_object(again(&e.to_value())).expect("a canonical entry reads back");
        assert_eq!(e, back);
    }
});
