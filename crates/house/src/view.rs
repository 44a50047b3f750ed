//! What a service view is made of (issue 37 §2, decision 0065). The house owns its state; a
//! service is a view of it for one call: [`Core`], the borrows every service holds (the
//! ground, the database, the guarded network, the card memo, the domain card and the system
//! agents' cards), and for the services that take or write mail [`Post`], the cells those
//! share (the inbox policies read, the webhook pushes waiting, the kick asked). Each view
//! derefs to its core, so inside a service `self.db` is the core's (as rustc's `FnCtxt`
//! derefs to the context it extends); what a view adds besides is named as its own field.
//!
//! The memos the house keeps between requests live here too, below every service that reads
//! them.

use std::cell::{Cell, RefCell};
use std::sync::Mutex;

use nyx5_proto::card::{AgentCard, DomainCard};
use nyx5_proto::vecmap::VecMap;
use nyx5_proto::{Error, ErrorKind, Refusal, Timestamp, Verified};
use nyx5_rules::policy::Policy;

use crate::config::{Config, MEMO_MAX_ENTRIES};
use crate::ground::Ground;
use crate::outbound::Guarded;
use crate::ports::{OutRequest, Reads, Stale};

/// The borrows every service holds.
pub struct Core<'h, D, N> {
    pub(crate) ground: Ground<'h>,
    pub(crate) config: &'h Config,
    pub(crate) db: &'h D,
    pub(crate) net: &'h Guarded<N>,
    pub(crate) cards: &'h CardMemo,
    pub(crate) card: &'h Verified<DomainCard>,
    pub(crate) systems: &'h SystemCards,
    /// Where attachments' sealed parts are kept, if anywhere.
    pub(crate) blobs: Option<&'h dyn crate::ports::Blobs>,
}

impl<D, N> Clone for Core<'_, D, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D, N> Copy for Core<'_, D, N> {}

impl<D, N> std::fmt::Debug for Core<'_, D, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("domain", &self.config.domain).finish_non_exhaustive()
    }
}

impl<'h, D, N> Core<'h, D, N> {
    /// The database seen through one request's stale-tolerant reads (the directory, history,
    /// index answers, mailbox and outbox pages): the routes hand their `Reads` to a service's
    /// method, which reads through this.
    pub fn stale<'a>(&self, reads: &'a Reads) -> Stale<'a, D>
    where
        'h: 'a,
    {
        Stale { db: self.db, reads }
    }

    /// The house's time now.
    pub fn now(&self) -> Timestamp {
        self.ground.now()
    }

    /// A fresh UUID v4.
    pub fn new_id(&self) -> String {
        self.ground.new_id()
    }
}

/// Most pushes (webhook pushes, A2A push notifications) waiting in one process to be sent.
pub const MAX_PENDING_PUSHES: usize = 256;
/// Most pushes waiting for one URL.
pub const MAX_PUSHES_PER_WEBHOOK: usize = 16;

/// What the services that take or write mail share besides their core: the mailbox, the
/// Libro, the email bridge and the queue.
#[derive(Clone, Copy)]
pub struct Post<'h> {
    /// The inbox policies read from the house's own stored cards.
    pub(crate) policies: &'h PolicyMemo,
    /// Webhook pushes waiting for the answer to go out.
    pub(crate) pushes: &'h RefCell<Vec<OutRequest>>,
    /// Whether mail due now was queued since the flag was last taken (the answer asks a kick).
    pub(crate) queued: &'h Cell<bool>,
    /// Jobs whose first attempt a send took, for the kick (see [`crate::store::queue::Taken`]).
    pub(crate) taken: &'h RefCell<Vec<crate::store::queue::Taken>>,
    /// The mailboxes written, for whoever waits on them (see [`crate::live`]).
    pub(crate) bell: &'h crate::live::Bell,
}

impl std::fmt::Debug for Post<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Post").field("queued", &self.queued.get()).finish_non_exhaustive()
    }
}

/// A service view over a [`Core`]: its `Debug` (the domain only) and its deref to the core.
macro_rules! view {
    ($view:ident) => {
        impl<D, N> std::fmt::Debug for $view<'_, D, N> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($view)).field("domain", &self.core.config.domain).finish_non_exhaustive()
            }
        }

        impl<'h, D, N> std::ops::Deref for $view<'h, D, N> {
            type Target = $crate::view::Core<'h, D, N>;

            fn deref(&self) -> &Self::Target {
                &self.core
            }
        }
    };
}
pub(crate) use view;

/// The cards of the house's own agents, `libro@`, `verifica@` and `tareas@`, signed with the
/// domain key when the house is built (see `libro`).
#[derive(Debug)]
pub struct SystemCards {
    pub libro: Verified<AgentCard>,
    pub verifica: Verified<AgentCard>,
    pub tareas: Verified<AgentCard>,
    /// `a2a@`: the A2A gateway's address (crate::a2a).
    pub a2a: Verified<AgentCard>,
}

/// The house's memo of remote cards (see `resolver`).
#[derive(Default)]
pub(crate) struct CardMemo {
    pub(crate) memo: nyx5_client::resolver::Memo,
}

/// What receiving needs from a recipient's card: its inbox policy and when the card ends.
#[derive(Debug, Clone)]
struct Inbox {
    policy: Policy,
    valid_until: Option<nyx5_proto::Timestamp>,
}

/// The inbox of each local agent, with the exact stored card text it was read from: the same
/// text gives the same answer, so a card is parsed again only when it changed.
#[derive(Default)]
pub(crate) struct PolicyMemo(Mutex<VecMap<String, (String, Inbox)>>);

impl PolicyMemo {
    /// The `inbox.policy` of `local`'s stored card `card` at `now`: an error when the card does
    /// not parse (internal), or 404 when it has expired (the agent no longer receives here).
    pub(crate) fn policy(&self, local: &str, card: &str, now: nyx5_proto::Timestamp) -> Result<Policy, Error> {
        let cached = self
            .0
            .lock()
            .ok()
            .and_then(|memo| memo.get(local).filter(|(text, _)| text == card).map(|(_, i)| i.clone()));
        let inbox = match cached {
            Some(inbox) => inbox,
            None => {
                let parsed = AgentCard::parse(card.as_bytes())
                    .map_err(|e| Error::new(ErrorKind::Internal, format!("stored card: {e}")))?;
                let inbox = Inbox { policy: Policy::of(parsed.inbox()), valid_until: parsed.valid_until() };
                if let Ok(mut memo) = self.0.lock() {
                    if memo.len() >= MEMO_MAX_ENTRIES {
                        memo.clear();
                    }
                    memo.insert(local.to_owned(), (card.to_owned(), inbox.clone()));
                }
                inbox
            }
        };
        if inbox.valid_until.is_some_and(|until| now >= until) {
            return Err(Refusal::RecipientCardExpired.because(format!("the card of {local} has expired")));
        }
        Ok(inbox.policy)
    }
}
