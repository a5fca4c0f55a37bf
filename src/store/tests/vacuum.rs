//! Postgres: the start-up check that says when autovacuum leaves the server's tables out
//! (their updated and deleted rows' space would never be reused).

use diesel::connection::SimpleConnection;
use diesel::{Connection, RunQueryDsl};
use diesel_async::AsyncPgConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;

use crate::store::postgres::{migrate, vacuum_gaps};
use crate::store::testing::PgTestDb;

#[derive(diesel::QueryableByName)]
struct Setting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    value: String,
}

#[tokio::test]
async fn the_tables_left_out_of_autovacuum_and_the_server_settings_that_turn_it_off_are_named() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let url = db.config.database_url.clone().unwrap();
    tokio::task::spawn_blocking(move || {
        migrate(&url, false).unwrap();
        let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::establish(&url).unwrap();
        let setting = |conn: &mut AsyncConnectionWrapper<AsyncPgConnection>, name: &str| {
            diesel::sql_query(format!("SELECT current_setting('{name}') AS value"))
                .get_result::<Setting>(conn)
                .unwrap()
                .value
        };
        // Whatever this server runs with, the check reports its settings as they are.
        let mut expected_off = Vec::new();
        for name in ["autovacuum", "track_counts"] {
            if setting(&mut conn, name) == "off" {
                expected_off.push(name.to_owned());
            }
        }
        let fresh = vacuum_gaps(&mut conn).unwrap();
        assert_eq!(fresh.settings_off, expected_off);
        assert!(fresh.tables_off.is_empty(), "{fresh:?}");

        // Any spelling of false Postgres takes opts a table out.
        conn.batch_execute(
            "ALTER TABLE tasks SET (autovacuum_enabled = off); \
             ALTER TABLE messages SET (autovacuum_enabled = 'FALSE'); \
             ALTER TABLE threads SET (autovacuum_enabled = true)",
        )
        .unwrap();
        let opted_out = vacuum_gaps(&mut conn).unwrap();
        assert_eq!(opted_out.tables_off, ["messages", "tasks"]);
        assert_eq!(opted_out.settings_off, expected_off);

        conn.batch_execute("ALTER TABLE tasks RESET (autovacuum_enabled)")
            .unwrap();
        assert_eq!(vacuum_gaps(&mut conn).unwrap().tables_off, ["messages"]);
    })
    .await
    .unwrap();
}
