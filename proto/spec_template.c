/* The spec `shardmeter spec --new` prints (pr_spec_template). */
#include "config.h"

#include "proto/spec.h"

/* The defaults of a key stay those of the specs written before it, so
 * that their run ids and training hold; what measured better since goes
 * here, for the specs written from now on. */
static const char spec_template[] =
"# A BlockTrain run spec (blocktrain.conf(5), RUN SPEC), as written by\n"
"# `shardmeter spec --new`.  Every host of the run loads the same spec;\n"
"# only the data paths may differ from host to host.  `shardmeter spec\n"
"# FILE` checks it and prints its run id, parameters and compute.\n"
"seed = 1\n"
"\n"
"[model]\n"
"# T blocks, one a host (or R replicas a block, [sync]); the noise levels\n"
"# are cut into T equal intervals unless cuts says otherwise\n"
"blocks = 4\n"
"width = 128\n"
"heads = 4\n"
"layers_per_block = 2\n"
"window = 64\n"
"# position_block = 1 trades one traversal an output for the causal LM's\n"
"# quality (one traversal a byte); the default is the whole window\n"
"p_prefix = 0.1\n"
"\n"
"[noise]\n"
"# the count form of the stratified levels, tilted to fewer masked bytes\n"
"# a row: the lowest full-window bound of the draws measured\n"
"draw = klevel\n"
"count_tilt = -0.5\n"
"\n"
"[data]\n"
"# relative paths are taken from this file's folder\n"
"train = train.txt\n"
"valid = valid.txt\n"
"test = test.txt\n"
"\n"
"[optim]\n"
"batch = 32\n"
"steps = 2000\n"
"lr = 1e-3\n"
"warmup = 100\n"
"lr_min = 1e-4\n"
"weight_decay = 0.1\n"
"betas = 0.9, 0.95\n"
"clip = 1.0\n"
"\n"
"[sync]\n"
"replicas = 1\n"
"local_steps = 50\n"
"\n"
"[generate]\n"
"# which masked bytes each denoising step decides, for requests that name\n"
"# none: random, confidence, margin or sampled (the likeliest drawn bytes\n"
"# first: the most words and the lowest cross-entropy measured, at some\n"
"# byte entropy; shardmeter eval --samples); not part of the run id\n"
"decode = sampled\n";

const char *
pr_spec_template(void)
{
	return spec_template;
}
