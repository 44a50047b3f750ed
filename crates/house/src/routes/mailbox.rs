//! GET /mailbox/:local and POST /mailbox/:local/ack — reading and acknowledging (spec §7, §8).

use nyx5_proto::auth::Keys;
use nyx5_proto::json::field;
use nyx5_proto::vecmap::VecSet;
use nyx5_proto::{Error, ErrorKind, Refusal, Timestamp, Value, address::check_id, limits};

use crate::auth::json_body;
use crate::http::{Request, Response};
use crate::mailbox::PageBounds;
use crate::ports::{Db, Net, Reads, Row};
use crate::{House, ok_body};

/// Mailbox page size: default and most.
pub const PAGE_DEFAULT: i64 = 50;
pub const PAGE_MAX: i64 = 200;
/// The most bytes one page's answer holds, unless its first envelope alone is larger: about
/// 2 MiB, so a mailbox of 1 MiB envelopes is read one or two at a time within a Worker's memory
/// and CPU, and any client reading answers of twice the envelope limit reads every page.
pub const PAGE_MAX_BYTES: usize = 2 * 1024 * 1024;
/// Most ids one ack may carry.
pub const ACK_MAX: usize = 500;

/// What wraps a page: `{"envelopes":[`, `],"next":<seq>,"ok":true}`.
const PAGE_FRAME_BYTES: usize = 64;
/// What wraps one envelope in a page, at most: `{"envelope":`, `,"received":"<time>","seq":<seq>`,
/// `,"stamp":"<entry id>"},`.
const ITEM_FRAME_BYTES: usize = 96 + 12 + nyx5_proto::limits::MAX_ID_LEN;
/// The size assumed for an envelope whose size the mailbox did not record (the house's own
/// notices, which are small): enough for the largest one.
const UNRECORDED_BYTES: i64 = 64 * 1024;

/// `GET /mailbox/:local?after=<seq>&limit=<n>&wait=<s>` — the owner's pending envelopes, oldest
/// first, at most `limit` and [`PAGE_MAX_BYTES`] (but always the first one waiting). With `wait`
/// (seconds, at most [`crate::live::MAX_WAIT_S`]) a page that would be empty waits for mail
/// that long (a long poll, docs/SPEC.md §8), and answers as soon as some arrives. The answer is written
/// around the stored canonical text of each envelope, never parsed and written again, in the
/// canonical form `Response::json` would give: `{"envelopes":[{"envelope":…,"received":…,
/// "seq":…}],"next":<seq>|null,"ok":true}`. `next` is the last `seq` when more may follow.
///
/// The owner is authenticated on the primary; the page is read through `reads`, a moment stale
/// at most, never older than the bookmark the request carried.
pub async fn read<D: Db, N: Net>(
    house: &House<D, N>,
    req: &Request,
    reads: &Reads,
    local: &str,
) -> Result<Response, Error> {
    let (_, nonce) = house.registry().authenticate_owner_unspent(req, local, Keys::CurrentOrGrace).await?;
    let number = |name: &str, default: i64, max: i64| -> Result<i64, Error> {
        req.query(name).map_or(Ok(default), |v| {
            v.parse::<i64>()
                .ok()
                .filter(|n| (0..=max).contains(n))
                .ok_or_else(|| Refusal::BadQuery.because(format!("`{name}` must be an integer from 0 to {max}")))
        })
    };
    let after = number("after", 0, i64::MAX)?;
    let limit = number("limit", PAGE_DEFAULT, PAGE_MAX)?;
    let wait = number("wait", 0, crate::live::MAX_WAIT_S)?;
    let budget = PAGE_MAX_BYTES - PAGE_FRAME_BYTES;
    let bounds = PageBounds {
        after,
        limit,
        bytes: budget as i64,
        overhead: ITEM_FRAME_BYTES as i64,
        unrecorded: UNRECORDED_BYTES,
    };
    // The token's nonce is spent while the page is read: two requests in flight, one round trip's
    // wait. A replayed token fails the spend, and the page read beside it is never answered.
    let rows = house.mailbox().page_waiting(reads, local, nonce, bounds, wait * 1000).await?;
    let body = write_page(&rows, limit)?;
    Ok(Response::bytes(200, "application/json", body))
}

/// The page's answer from the rows the store cut (`inbox::page`), for a request of `limit`:
/// each stored envelope written around, as [`read`] describes. Pure: what a page costs beyond
/// its one query (the edge harness, `benches/edge`, times it).
pub fn write_page(rows: &[Row], limit: i64) -> Result<Vec<u8>, Error> {
    let budget = PAGE_MAX_BYTES - PAGE_FRAME_BYTES;
    let candidates = rows.first().and_then(|r| r.int("candidates")).unwrap_or(0);
    let mut items =
        String::with_capacity(rows.iter().map(|r| r.text("envelope").map_or(0, str::len)).sum::<usize>() + 128);
    let (mut taken, mut last) = (0_i64, None);
    for r in rows {
        let text = r.text("envelope").unwrap_or_default();
        let seq = r.int("seq").unwrap_or(0);
        let item = item(text, seq, r.int("received_at").unwrap_or(0), r.text("stamp"))?;
        // The store cut the page by recorded sizes; this holds it to the budget exactly.
        if taken > 0 && items.len() + item.len() + 1 > budget {
            break;
        }
        if taken > 0 {
            items.push(',');
        }
        items.push_str(&item);
        taken += 1;
        last = Some(seq);
    }
    let more = taken > 0 && (taken < candidates || candidates == limit);
    let next = if more { last } else { None };
    let mut body = String::with_capacity(items.len() + PAGE_FRAME_BYTES);
    body.push_str("{\"envelopes\":[");
    body.push_str(&items);
    body.push_str("],\"next\":");
    body.push_str(&next.map_or_else(|| "null".to_owned(), |n| n.to_string()));
    body.push_str(",\"ok\":true}");
    Ok(body.into_bytes())
}

/// One page item, `{"envelope":<stored text>,"received":"<time>","seq":<seq>,"stamp"?:<entry id>}`
/// (`stamp`: the Libro entry that paid a stamped envelope's way in, §19). The stored text
/// is the canonical JSON the house wrote when it accepted the envelope; anything else there (a
/// row written by hand) is read and written again, and what does not read is our fault.
fn item(stored: &str, seq: i64, received: i64, stamp: Option<&str>) -> Result<String, Error> {
    let rewritten;
    let envelope = if stored.starts_with('{') && stored.ends_with('}') {
        stored
    } else {
        rewritten = Value::parse(stored.as_bytes(), limits::MAX_ENVELOPE_BYTES)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("mailbox row {seq}: {}", e.reason)))?
            .canonical_string();
        &rewritten
    };
    let mut out = String::with_capacity(envelope.len() + ITEM_FRAME_BYTES);
    out.push_str("{\"envelope\":");
    out.push_str(envelope);
    out.push_str(",\"received\":");
    nyx5_proto::json::write_string(&Timestamp(received).to_rfc3339(), &mut out);
    out.push_str(",\"seq\":");
    out.push_str(&seq.to_string());
    if let Some(stamp) = stamp {
        out.push_str(",\"stamp\":");
        nyx5_proto::json::write_string(stamp, &mut out);
    }
    out.push('}');
    Ok(out)
}

/// POST /mailbox/:local/ack `{"ids": [...]}` — idempotent; answers how many were newly acked.
pub async fn ack<D: Db, N: Net>(house: &House<D, N>, req: &Request, local: &str) -> Result<Response, Error> {
    // The token verifies before anything of the mailbox is read: reading the facts beside the
    // owner's card would save a round trip but let any stranger make the house read up to a
    // thousand rows per request (docs/decisions/0058-round-trips-and-warm-start.md, decision 5).
    // The token's nonce is spent in the batch that acknowledges (a replay fails it whole).
    let (_, nonce) = house.registry().authenticate_owner_unspent(req, local, Keys::CurrentOrGrace).await?;
    let list = ack_list(req)?;
    let acked = house.mailbox().ack(local, &list, nonce).await?;
    Ok(Response::json(200, &ok_body([("acked", acked.into())])))
}

/// The ids an acknowledgment's body lists, distinct, as the JSON array the store reads.
fn ack_list(req: &Request) -> Result<String, Error> {
    let body = json_body(req)?;
    let ids = field::array(&body, "ids")?;
    if ids.is_empty() || ids.len() > ACK_MAX {
        return Err(Refusal::BadMember.because(format!("`ids` must list 1 to {ACK_MAX} envelope ids")));
    }
    let mut distinct = VecSet::new();
    for id in ids {
        let id = id.as_str().ok_or_else(|| Refusal::BadMember.because("`ids` lists strings"))?;
        check_id(id)?;
        distinct.insert(id);
    }
    Ok(Value::Array(distinct.into_iter().map(Value::from).collect()).canonical_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ports::SqlValue;

    /// A stored envelope of exactly `len` bytes, at `seq`, with the store's count of candidates.
    fn row(len: usize, seq: i64, candidates: i64) -> Row {
        let pad = "p".repeat(len - r#"{"p":""}"#.len());
        Row::from_pairs([
            ("envelope", SqlValue::Text(format!(r#"{{"p":"{pad}"}}"#))),
            ("seq", SqlValue::Int(seq)),
            ("received_at", SqlValue::Int(0)),
            ("candidates", SqlValue::Int(candidates)),
        ])
    }

    fn seqs(page: &[u8]) -> (Vec<i64>, Value) {
        let v = Value::parse(page, usize::MAX).unwrap();
        let o = v.as_object().unwrap();
        let list = o["envelopes"].as_array().unwrap();
        (list.iter().map(|e| e.as_object().unwrap()["seq"].as_safe_integer().unwrap()).collect(), o["next"].clone())
    }

    #[test]
    fn a_page_holds_to_its_bytes_exactly_and_always_holds_the_first_envelope() {
        let budget = PAGE_MAX_BYTES - PAGE_FRAME_BYTES;
        // The first item's text, and what is left of the budget after it and a comma.
        let first = row(1_000_000, 1, 3);
        let first_item = item(first.text("envelope").unwrap(), 1, 0, None).unwrap();
        let frame = item(r#"{"p":""}"#, 2, 0, None).unwrap().len() - r#"{"p":""}"#.len();
        let room = budget - first_item.len() - 1;
        // A second that fills the page to the byte is taken; one byte more is left for the next.
        let fits = [first.clone(), row(room - frame, 2, 3), row(10, 3, 3)];
        let (taken, next) = seqs(&write_page(&fits, 50).unwrap());
        assert_eq!(taken, [1, 2]);
        assert_eq!(next.as_safe_integer(), Some(2), "more may follow");
        let over = [first, row(room - frame + 1, 2, 3)];
        let (taken, next) = seqs(&write_page(&over, 50).unwrap());
        assert_eq!(taken, [1]);
        assert_eq!(next.as_safe_integer(), Some(1));
        // A first envelope larger than the whole budget is still read, alone.
        let (taken, _) = seqs(&write_page(&[row(budget + 10, 7, 2), row(10, 8, 2)], 50).unwrap());
        assert_eq!(taken, [7]);
        // Everything the store found, and fewer than asked: nothing follows.
        let (taken, next) = seqs(&write_page(&[row(10, 4, 2), row(10, 5, 2)], 50).unwrap());
        assert_eq!((taken, next), (vec![4, 5], Value::Null));
        // A stored text that is not one object from brace to brace is read and written again.
        let trailing = item("{\"a\":1} ", 9, 0, None).unwrap();
        assert!(trailing.starts_with(r#"{"envelope":{"a":1},"received""#), "{trailing}");
        let leading = item(" {\"a\":1}", 9, 0, None).unwrap();
        assert!(leading.starts_with(r#"{"envelope":{"a":1},"received""#), "{leading}");
        // As many as asked: more may follow.
        let (_, next) = seqs(&write_page(&[row(10, 4, 2), row(10, 5, 2)], 2).unwrap());
        assert_eq!(next.as_safe_integer(), Some(5));
    }
}
