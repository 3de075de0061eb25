"""Users and roles by id (§9 #12–#13), used to put names on alert recipients."""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from backend.auth import require_user
from backend.db import request_db
from backend.params import path_uuid
from backend.responses import JSONResponse, not_found


async def get_user(request: Request) -> JSONResponse:
    await require_user(request)
    user_id = path_uuid(request, "user_id", "user")
    db = request_db(request)
    row = await db.fetch_one("SELECT * FROM users WHERE id = ?", (user_id,))
    if row is None:
        raise not_found(f"user {user_id} not found")
    roles = await db.fetch_all(
        "SELECT r.name FROM user_roles ur JOIN roles r ON r.id = ur.role_id WHERE ur.user_id = ? ORDER BY r.name",
        (user_id,),
    )
    return JSONResponse(
        {
            "id": row["id"],
            "username": row["username"],
            "first_name": row["first_name"],
            "last_name": row["last_name"],
            "email": row["email"],
            "roles": [r["name"] for r in roles],
            "is_active": bool(row["is_active"]),
            "created_date": row["created_date"],
        }
    )


async def get_role(request: Request) -> JSONResponse:
    await require_user(request)
    role_id = path_uuid(request, "role_id", "role")
    db = request_db(request)
    row = await db.fetch_one("SELECT * FROM roles WHERE id = ?", (role_id,))
    if row is None:
        raise not_found(f"role {role_id} not found")
    return JSONResponse({"id": row["id"], "name": row["name"], "description": row["description"]})


ROUTES = [
    Route("/v1/core/users/{user_id}", get_user, methods=["GET"]),
    Route("/v1/core/roles/{role_id}", get_role, methods=["GET"]),
]
