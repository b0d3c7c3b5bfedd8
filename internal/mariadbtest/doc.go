// Package mariadbtest gives tests a MariaDB (or MySQL) database of their own.
//
// DB connects to the shared server named by OUTBOX_TEST_MYSQL_URL (by
// default root@tcp(127.0.0.1:3306)/), creates a fresh database test_<random>
// and drops it when the test ends, so tests can run in parallel and leave
// nothing behind. When that server does not answer, the test is skipped
// with the reason, or fails when CI=true.
//
// Private starts a mariadbd of the test's own on a temporary data directory
// and a free loopback port, for tests that stop, restart or crash the
// server. It is stopped and removed when the test ends.
//
// Every connection this package hands out has parseTime=true, loc=UTC and
// the session time_zone '+00:00', so DATETIME values round-trip as UTC
// time.Time.
package mariadbtest
