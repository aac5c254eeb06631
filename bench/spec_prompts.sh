# bench/spec_prompts.sh — the prompts of bench/spec.sh and
# bench/spec_counts.sh, sourced with D set: one file per prompt in $D,
# rendered as SmolLM2-135M-Instruct's ChatML renders one user turn.
#   edit, story: bench/spec.sh's two workloads (most of the reply copies
#   the prompt; little to copy); fix, code, summ, poem, bike, list: more
#   kinds of reply, for the counts of prompt lookup's rules.
chat() { printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$1"; }
chat "Rewrite the paragraph below exactly as it is, word for word, but write \"dog\" where it says \"cat\".

The old cat slept on the warm stones by the river every afternoon. When the sun went down, the cat walked \
home along the narrow path between the fields, past the mill and the bakery, where the baker always left a \
small bowl of milk by the door. The children of the village knew the cat by name and called to it from the \
windows, and the cat, who liked the attention, would stop and sit in the road until every child had seen it. \
In winter the cat stayed by the stove in the bakery, and the baker said it was the best worker he had ever had." >"$D/edit"
chat "Write a long story about a dragon who wants to learn to sing." >"$D/story"
chat "Fix the spelling mistakes in this text and write it out again in full:

Yesterday we went to the markett to buy some aples and oranges. The weathr was nice and the sun was shinning. \
My brother wanted to by a new bike, but the shop was closed becuase it was sunday. We walked home through the \
park and saw many ducks on the pond." >"$D/fix"
chat "Rename the variable x to count in this C function and print the whole function:

int sum(const int *a, int n)
{
	int x = 0;
	for (int i = 0; i < n; i++)
		x += a[i];
	return x;
}" >"$D/code"
chat "Summarize this text in three sentences:

The town library opened in 1902 with a gift of two thousand books from a local merchant. For fifty years it \
was the only public building in the valley with electric light, and on winter evenings farmers came in from \
miles around to read the newspapers by its lamps. In 1960 a fire destroyed the reading room, but the books \
were saved by volunteers who carried them out through the snow. The new building, finished in 1964, has a \
children's room, a music collection and a garden where readings are held in summer." >"$D/summ"
chat "Write a poem about the sea at night." >"$D/poem"
chat "Explain how a bicycle works, step by step." >"$D/bike"
chat "List ten ideas for a birthday party for a seven year old, with one sentence each." >"$D/list"
