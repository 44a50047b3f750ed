//! Maps (method, path) to a route. Unknown paths are 404, known paths with another method 405.

use nyx5_proto::{Error, Refusal};

use crate::House;
use crate::http::{Request, Response, no_route};
use crate::ports::{Db, Net, Reads};
use crate::{routes, web};

fn method_not_allowed(req: &Request) -> Error {
    Refusal::WrongMethod.because(format!("{} is not allowed on {}", req.method, req.path))
}

/// `reads` are the request's reads that may be a moment stale: the routes that serve them (cards,
/// the directory, history, index answers, the home page, mailbox and outbox pages) take them.
pub(crate) async fn route<D: Db, N: Net>(house: &House<D, N>, req: &Request, reads: &Reads) -> Result<Response, Error> {
    let segments: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
    let m = req.method.as_str();
    match (m, segments.as_slice()) {
        ("GET", [""]) => web::home(house, reads).await,
        ("GET", ["spec"]) => web::document(req, "text/html; charset=utf-8", web::SPEC_HTML),
        ("GET", ["llms.txt"]) => web::document(req, "text/plain; charset=utf-8", web::LLMS_TXT),
        ("GET", ["style.css"]) => {
            Ok(web::page("text/css; charset=utf-8", web::STYLE_CSS.into(), web::DOCUMENT_MAX_AGE))
        }
        ("GET", ["favicon.svg"]) => Ok(web::page("image/svg+xml", web::FAVICON_SVG.into(), web::DOCUMENT_MAX_AGE)),
        ("GET", [".well-known", "agent-card.json"]) => web::a2a::get_house(house, reads).await,
        ("GET", ["agents", local, "agent-card.json"]) => web::a2a::get_agent(house, local).await,
        ("GET", [".well-known", "jwks.json"]) => Ok(web::a2a::jwks(house)),
        ("POST", ["agents", local, "a2a"]) => {
            let client = crate::routes::agents::client(req);
            Ok(house.a2a().rpc(local, &req.body, client.as_deref()).await)
        }
        (
            _,
            [""]
            | ["spec"]
            | ["llms.txt"]
            | ["style.css"]
            | ["favicon.svg"]
            | [".well-known", "agent-card.json"]
            | [".well-known", "jwks.json"]
            | ["agents", _, "agent-card.json"]
            | ["agents", _, "a2a"],
        ) => Err(method_not_allowed(req)),
        ("GET", [".well-known", "nyx5.json"]) => Ok(routes::well_known::get(house)),
        ("GET", ["health"]) => routes::health::get(house).await,
        ("GET", ["agents"]) => routes::agents::directory(house, req, reads).await,
        ("POST", ["agents"]) => routes::agents::register(house, req).await,
        ("GET", ["agents", local]) => routes::agents::get(house, local).await,
        ("GET", ["agents", local, "settings"]) => routes::settings::get(house, req, local).await,
        ("GET", ["agents", local, "hold"]) => routes::drafts::get(house, req, local).await,
        ("PUT", ["agents", local, "hold"]) => routes::drafts::put(house, req, local).await,
        ("DELETE", ["agents", local, "hold"]) => routes::drafts::delete(house, req, local).await,
        ("GET", ["agents", local, "historial"]) => routes::libro::history(house, reads, local).await,
        ("GET", ["invitations"]) => routes::invitations::list(house, req).await,
        ("POST", ["invitations"]) => routes::invitations::create(house, req).await,
        ("GET", ["mailbox", local]) => routes::mailbox::read(house, req, reads, local).await,
        ("POST", ["mailbox", local, "ack"]) => routes::mailbox::ack(house, req, local).await,
        (
            _,
            [".well-known", "nyx5.json"]
            | ["health"]
            | ["agents"]
            | ["agents", _]
            | ["agents", _, "settings"]
            | ["agents", _, "hold"]
            | ["agents", _, "historial"]
            | ["invitations"]
            | ["mailbox", _]
            | ["mailbox", _, "ack"],
        ) => Err(method_not_allowed(req)),
        ("POST", ["inbound"]) => routes::inbound::post(house, req).await,
        ("POST", ["shards", "move"]) => routes::shards::move_mailbox(house, req).await,
        (_, ["shards", "move"]) => Err(method_not_allowed(req)),
        ("GET", ["lists", local]) => routes::lists::get(house, req, local).await,
        ("POST", ["lists", local]) => routes::lists::post(house, req, local).await,
        ("GET", ["pins"]) => routes::pins::list(house, req).await,
        ("POST", ["pins", domain, "confirm"]) => routes::pins::confirm(house, req, domain).await,
        (_, ["inbound"] | ["lists", _] | ["pins"] | ["pins", _, "confirm"]) => Err(method_not_allowed(req)),
        ("POST", ["email", "in"]) => routes::email::post_in(house, req).await,
        ("POST", ["email", "out"]) => routes::email::post_out(house, req).await,
        (_, ["email", "in"] | ["email", "out"]) => Err(method_not_allowed(req)),
        ("GET", ["libro", "cuenta", address]) => routes::libro::account(house, req, address).await,
        ("GET", ["libro", "contrato", id]) => routes::libro::contract(house, req, id).await,
        ("POST", ["libro", "topup"]) => routes::libro::topup(house, req).await,
        ("GET", ["libro", "diario"]) => routes::libro::journal(house, req).await,
        (_, ["libro", "cuenta", _] | ["libro", "contrato", _] | ["libro", "topup"] | ["libro", "diario"]) => {
            Err(method_not_allowed(req))
        }
        ("POST", ["index", "houses"]) => routes::index::register(house, req).await,
        ("GET", ["index", "houses"]) => routes::index::houses(house, req, reads).await,
        ("GET", ["index", "agents"]) => routes::index::search(house, req, reads).await,
        (_, ["index", "houses"] | ["index", "agents"]) => Err(method_not_allowed(req)),
        ("GET", ["tareas"]) => routes::tareas::list(house, req).await,
        ("POST", ["tareas"]) => routes::tareas::add(house, req).await,
        ("POST", ["tareas", id, "retire"]) => routes::tareas::retire(house, req, id).await,
        (_, ["tareas"] | ["tareas", _, "retire"]) => Err(method_not_allowed(req)),
        ("GET", ["apps"]) => routes::apps::list(house).await,
        ("POST", ["apps"]) => routes::apps::add(house, req).await,
        ("GET", ["apps", id]) => routes::apps::get(house, id).await,
        ("DELETE", ["apps", id]) => routes::apps::remove(house, req, id).await,
        (_, ["apps"] | ["apps", _]) => Err(method_not_allowed(req)),
        ("GET", ["drafts", local]) => routes::drafts::list(house, req, local).await,
        ("GET", ["drafts", local, id]) => routes::drafts::get_one(house, req, local, id).await,
        ("POST", ["drafts", local, id, "approve"]) => routes::drafts::approve(house, req, local, id).await,
        ("POST", ["drafts", local, id, "decline"]) => routes::drafts::decline(house, req, local, id).await,
        (_, ["drafts", _] | ["drafts", _, _] | ["drafts", _, _, "approve" | "decline"]) => Err(method_not_allowed(req)),
        ("POST", ["attachments"]) => routes::attachments::create(house, req).await,
        ("GET", ["attachments", id]) => routes::attachments::show(house, req, id).await,
        ("DELETE", ["attachments", id]) => routes::attachments::delete(house, req, id).await,
        ("PUT", ["attachments", id, n]) => routes::attachments::put(house, req, id, n).await,
        ("GET", ["attachments", id, n]) => routes::attachments::part(house, req, id, n).await,
        (_, ["attachments"] | ["attachments", _] | ["attachments", _, _]) => Err(method_not_allowed(req)),
        ("POST", ["outbound"]) => routes::outbound::post(house, req).await,
        ("GET", ["outbox", local]) => routes::outbox::get(house, req, reads, local).await,
        (_, ["outbound"] | ["outbox", _]) => Err(method_not_allowed(req)),
        _ => Err(no_route(req)),
    }
}
