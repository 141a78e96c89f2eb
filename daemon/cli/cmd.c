/* The table of shardmeter's commands.  A new command is its cmd_<name>.c
 * and its line here; --help lists them in this order. */
#include "config.h"

#include <string.h>

#include "daemon/cli/cmd.h"

extern const struct cmd_entry cmd_spec_entry, cmd_train_entry,
    cmd_eval_entry, cmd_generate_entry, cmd_status_entry,
    cmd_assemble_entry, cmd_demo_entry, cmd_init_entry, cmd_id_entry,
    cmd_cluster_entry, cmd_probe_entry, cmd_plan_entry,
    cmd_dashboard_entry, cmd_strikes_entry;
extern const struct cmd_entry cmd_export_entry, cmd_import_entry;
extern const struct cmd_entry cmd_cuts_entry;

const struct cmd_entry *const cmd_table[] = {
	&cmd_spec_entry,
	&cmd_train_entry,
	&cmd_eval_entry,
	&cmd_generate_entry,
	&cmd_status_entry,
	&cmd_dashboard_entry,
	&cmd_strikes_entry,
	&cmd_assemble_entry,
	&cmd_export_entry,
	&cmd_import_entry,
	&cmd_demo_entry,
	&cmd_init_entry,
	&cmd_id_entry,
	&cmd_cluster_entry,
	&cmd_probe_entry,
	&cmd_plan_entry,
	&cmd_cuts_entry,
	NULL
};

const struct cmd_entry *
cmd_find(const char *name)
{
	const struct cmd_entry *const *e;

	for (e = cmd_table; *e != NULL; e++)
		if (strcmp((*e)->name, name) == 0)
			return *e;
	return NULL;
}
