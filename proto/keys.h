/* Definition tables of INI keys, after tmux's options-table.c: one row per
 * key, which parsing, range checks, defaults and printing all read.  The
 * run spec (proto/spec.c) and blocktrain.conf (daemon/core/conf.c) have one. */
#ifndef PR_KEYS_H
#define PR_KEYS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
	PR_KEY_INT,     /* int, from min to max */
	PR_KEY_U64,     /* uint64_t, any non-negative integer */
	PR_KEY_REAL,    /* double, finite, from min to max */
	PR_KEY_STR,     /* char[size] */
	PR_KEY_CHOICE,  /* char[size] holding one of choices */
	PR_KEY_SHA256,  /* char[65]: 64 hex digits, kept in lower case */
	PR_KEY_SIZE,    /* size_t bytes, written as bytes or with M or G */
	PR_KEY_MIB,     /* size_t bytes, written in MiB from min to max */
	PR_KEY_CUSTOM   /* read and written by the row's ops */
} pr_key_type;

#define PR_KEY_MIN_OPEN 0x01    /* min itself is out of range */
#define PR_KEY_MAX_OPEN 0x02    /* max itself is out of range */
#define PR_KEY_HASHED   0x04    /* part of the run spec's canonical encoding */
#define PR_KEY_ALIAS    0x08    /* sets keys with rows of their own: never
				 * printed */
#define PR_KEY_PATH     0x10    /* a path taken relative to the file's folder */
#define PR_KEY_SOMA     0x20    /* hashed and printed only in a spec of
				 * method = soma, so that adding SOMA left
				 * every BlockTrain run id and spec text as
				 * it was */
#define PR_KEY_NEW_DEFAULT 0x40 /* left out of the run id and the printed
				 * spec at its default: a key added after
				 * specs existed keeps their ids */

typedef struct pr_key pr_key;

/* A key no built-in type fits (a list, a pair, host:port).  set returns 0
 * or a negative code with the reason in msg; ctx is the caller's parse
 * context, NULL when the row's default is applied.  format writes the
 * value and returns 1 when it is derived from other keys or absent: such
 * a key is printed commented out, so that reading the text back gives
 * the same values. */
typedef struct {
	int (*set)(const pr_key *k, void *obj, void *ctx, const char *v,
	    char *msg);
	int (*format)(const pr_key *k, const void *obj, char *buf, size_t len);
} pr_key_ops;

struct pr_key {
	const char *section;            /* "": before any section */
	const char *name;
	pr_key_type type;
	size_t offset, size;            /* of the field in the struct */
	double min, max;                /* INT, REAL, MIB; INFINITY: no max */
	double def;                     /* INT, U64, REAL, SIZE; MIB in MiB */
	const char *def_str;            /* STR, CHOICE; CUSTOM: given to set */
	const char *const *choices;     /* CHOICE: NULL-terminated */
	unsigned flags;                 /* PR_KEY_* */
	const pr_key_ops *ops;          /* CUSTOM */
	const char *doc;
};

/* The row of section.name, or NULL. */
const pr_key *pr_key_find(const pr_key *t, size_t n, const char *section,
    const char *name);
/* Whether some row of t is in section. */
int pr_key_section_known(const pr_key *t, size_t n, const char *section);
/* Parses v into the row's field of obj: 0, or KN_EINVAL with "key: reason"
 * in msg (PR_ERR_LEN), naming the allowed range when there is one. */
int pr_key_set(const pr_key *k, void *obj, void *ctx, const char *v,
    char *msg);
/* Checks the row's field of obj against its range or choices. */
int pr_key_check(const pr_key *k, const void *obj, char *msg);
int pr_key_check_all(const pr_key *t, size_t n, const void *obj, char *msg);
/* Every row's default into obj, which the caller has zeroed. */
void pr_key_defaults(const pr_key *t, size_t n, void *obj);
/* The value of the row's field as it is written in the file; 1 when it is
 * derived or absent (see pr_key_ops). */
int pr_key_format(const pr_key *k, const void *obj, char *buf, size_t len);
/* Every row but aliases as INI text, a "[section]" line before each
 * section; 0, or KN_EIO when f fails. */
int pr_key_print(const pr_key *t, size_t n, const void *obj, FILE *f);
/* "[section] name" or "name", as messages name a key. */
void pr_key_label(const pr_key *k, char *buf, size_t len);
/* The shortest decimal that reads back as x. */
void pr_key_real(double x, char *buf, size_t len);

#endif
