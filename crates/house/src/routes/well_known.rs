//! GET /.well-known/nyx5.json — the signed domain card (spec §3).

use crate::House;
use crate::http::Response;
use crate::ports::{Db, Net};

pub fn get<D: Db, N: Net>(house: &House<D, N>) -> Response {
    Response::json(200, &house.card().to_value())
}
