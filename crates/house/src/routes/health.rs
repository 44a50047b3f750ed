//! GET /health — liveness, queue depth and the age of the oldest due job.

use nyx5_proto::Error;

use crate::http::Response;
use crate::ports::{Db, Net};
use crate::{House, ok_body};

pub async fn get<D: Db, N: Net>(house: &House<D, N>) -> Result<Response, Error> {
    let now = house.now().millis();
    let row = house.queue().depth(now).await?;
    let oldest_due_ms = row.int("oldest_due").map(|t| (now - t).max(0));
    Ok(Response::json(
        200,
        &ok_body([
            ("house", house.config.domain.as_str().into()),
            ("queue_depth", row.int("depth").unwrap_or(0).into()),
            ("oldest_due_ms", oldest_due_ms.into()),
        ]),
    ))
}
