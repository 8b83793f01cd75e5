/* migrations: schema/NNN_*.sql embedded at build time (daemon.cmake generates
 * the table), applied in order by store_open. */
#ifndef CTUNE_MIGRATIONS_H
#define CTUNE_MIGRATIONS_H

struct migration {
  int version;      /* the NNN of the file name */
  const char *name; /* file name, for errors */
  const char *sql;
};

extern const struct migration migrations_table[];
extern const int migrations_count;

#endif
